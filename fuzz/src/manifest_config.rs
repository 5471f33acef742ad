//! YAML an operator or a capsule author writes: `murmur.yaml` (a capsule's,
//! and an artifact's) and roostd's config. Beyond "no panic": parsing is
//! deterministic, and an artifact manifest that parses still parses after
//! a round trip through its own YAML.

use std::path::Path;

use roost_wire::artifact::ArtifactManifest;
use roostd::config::DaemonConfig;
use roostd::manifest::CapsuleManifest;

/// One input.
pub fn run(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let path = Path::new("/fuzz/capsule/murmur.yaml");
    let first = CapsuleManifest::parse(text, path)
        .map(|m| format!("{m:?}"))
        .map_err(|e| e.to_string());
    let again = CapsuleManifest::parse(text, path)
        .map(|m| format!("{m:?}"))
        .map_err(|e| e.to_string());
    assert_eq!(first, again);
    if let Ok(artifact) = ArtifactManifest::parse(text)
        && let Ok(yaml) = serde_yaml::to_string(&artifact)
    {
        let back = ArtifactManifest::parse(&yaml).expect("its own YAML parses");
        assert_eq!(format!("{back:?}"), format!("{artifact:?}"));
    }
    let _ = DaemonConfig::from_yaml(text);
}
