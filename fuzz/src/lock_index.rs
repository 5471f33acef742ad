//! What pins and finds artifacts: `murmur.lock` and a registry's index.
//! Beyond "no panic": a lock or an index that parses is printed and parsed
//! back to the same value, and an index never holds a bundle path that
//! leaves the registry.

use roost_wire::artifact::{MurmurLock, RegistryIndex};

/// One input.
pub fn run(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data)
        && let Ok(lock) = MurmurLock::parse(text)
    {
        let yaml = serde_yaml::to_string(&lock).expect("prints");
        assert_eq!(MurmurLock::parse(&yaml).expect("parses back"), lock);
    }
    if let Ok(index) = RegistryIndex::parse(data, "fuzz") {
        for bundle in index.artifacts.iter().flat_map(|a| &a.bundles) {
            assert!(!bundle.path.starts_with('/'), "{}", bundle.path);
            assert!(
                !bundle.path.split('/').any(|c| c == ".."),
                "{}",
                bundle.path
            );
        }
        let json = serde_json::to_vec(&index).expect("prints");
        assert_eq!(
            RegistryIndex::parse(&json, "fuzz").expect("parses back"),
            index
        );
    }
}
