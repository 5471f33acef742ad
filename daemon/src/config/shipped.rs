//! The commented configuration the package installs
//! (`systemd/roost.yaml`): every setting it shows, uncommented, is one
//! roostd accepts, with the default it names.

use super::DaemonConfig;

/// The file with its commented-out settings uncommented: `#key:` and
/// `#  key:` lines (prose, `# …`, stays a comment).
fn uncommented(text: &str) -> String {
    let setting = |rest: &str| {
        let key = rest.strip_prefix("  ").unwrap_or(rest);
        key.split_once(':').is_some_and(|(k, _)| {
            !k.is_empty()
                && k.bytes()
                    .all(|b| b.is_ascii_lowercase() || b == b'_' || b.is_ascii_digit())
        })
    };
    text.lines()
        .map(|line| match line.strip_prefix('#') {
            Some(rest) if setting(rest) => rest,
            _ => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn every_setting_the_shipped_file_shows_parses_and_is_the_default() {
    let shipped = include_str!("../../../systemd/roost.yaml");
    let as_is = DaemonConfig::from_yaml(shipped).expect("the file as shipped");
    let all = uncommented(shipped);
    assert!(all.contains("\nstore:\n  sync: full"), "{all}");
    let spelled = DaemonConfig::from_yaml(&all).unwrap_or_else(|e| panic!("{e}\n{all}"));
    let yaml = |c: &DaemonConfig| {
        let mut c = c.clone();
        c.registry = None;
        serde_yaml::to_string(&c).expect("yaml")
    };
    assert_eq!(
        yaml(&spelled),
        yaml(&as_is),
        "a shown value is not the default"
    );
    assert_eq!(spelled.registry.as_deref(), Some("/var/lib/roost/registry"));
}
