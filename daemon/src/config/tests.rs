//! The config's parse, precedence and checks.

use super::*;

#[test]
fn retention_has_one_section_and_the_old_key_still_works_with_a_warning() {
    let config = DaemonConfig::from_yaml(
        "retention: {interval_secs: 5, sessions: {max_count: 3}, trace: {max_bytes: 100}}",
    )
    .expect("retention");
    assert_eq!(config.retention.interval_secs, 5);
    assert_eq!(config.retention.sessions.max_count, 3);
    assert_eq!(config.retention.sessions.max_age_secs, 7 * 24 * 3600);
    assert_eq!(config.retention.trace.max_bytes, 100);
    assert_eq!(config.retention.tool_output.max_bytes, 64 << 20);
    assert!(config.deprecations.is_empty());

    let old = DaemonConfig::from_yaml("a2a: {retention: {max_tasks: 9, interval_secs: 2}}")
        .expect("old key");
    assert_eq!(old.retention.tasks.max_count, 9);
    assert_eq!(old.retention.tasks.max_age_secs, 7 * 24 * 3600);
    assert_eq!(old.retention.interval_secs, 2);
    assert_eq!(old.deprecations.len(), 1);
    assert!(
        old.deprecations[0].contains("retention.tasks"),
        "{:?}",
        old.deprecations
    );

    let err = DaemonConfig::from_yaml("retention: {sessions: {max_cnt: 3}}")
        .expect_err("typo")
        .to_string();
    assert!(err.contains("max_cnt"), "{err}");
    let mut zero = DaemonConfig::from_yaml("retention: {interval_secs: 0}").expect("parses");
    zero.state_dir = PathBuf::from("/tmp/x");
    let err = zero.validate().expect_err("0 s");
    assert!(
        matches!(&err, ConfigError::Invalid { field, .. } if field == "retention.interval_secs"),
        "{err:?}"
    );
    assert!(err.to_string().contains("retention.interval_secs"), "{err}");
}

#[test]
fn hibernation_max_awake_defaults_to_ten_thousand_and_refuses_zero() {
    assert_eq!(DaemonConfig::default().hibernation.max_awake, Some(10_000));
    let none = DaemonConfig::from_yaml("hibernation: {max_awake: null}").expect("parses");
    assert_eq!(none.hibernation.max_awake, None);
    let mut zero = DaemonConfig::from_yaml("hibernation: {max_awake: 0}").expect("parses");
    zero.state_dir = PathBuf::from("/tmp/x");
    let err = zero.validate().expect_err("0").to_string();
    assert!(
        err.contains("hibernation.max_awake must be at least 1"),
        "{err}"
    );
}

#[test]
fn unknown_key_is_named() {
    let err = DaemonConfig::from_yaml("pool: {max_instancez: 3}")
        .expect_err("must be refused")
        .to_string();
    assert!(err.contains("max_instancez"), "{err}");
}

#[test]
fn partial_file_keeps_defaults() {
    let config = DaemonConfig::from_yaml("a2a_listen: 127.0.0.1:0\npool: {max_memory_mb: 64}")
        .expect("valid");
    assert_eq!(config.a2a_listen.port(), 0);
    assert_eq!(config.pool.max_memory_mb, 64);
    assert_eq!(config.pool.max_instances, 1000);
    assert_eq!(config.limits.timeout_secs, 30);
}

#[test]
fn registry_must_be_a_directory_or_http() {
    let mut config = DaemonConfig::from_yaml("registry: ftp://example.com/r").expect("parses");
    config.state_dir = PathBuf::from("/tmp/x");
    let err = config.validate().expect_err("ftp refused").to_string();
    assert!(err.contains("only http:// registries"), "{err}");
    config.registry = Some("http://127.0.0.1:8080/registry".into());
    config.validate().expect("http accepted");
    config.registry = None;
    assert_eq!(config.registry_location(), "/tmp/x/registry");
}

#[test]
fn tcp_control_needs_a_token_file() {
    let mut config =
        DaemonConfig::from_yaml("control: {tcp_listen: 127.0.0.1:7421}").expect("parses");
    config.state_dir = PathBuf::from("/tmp/x");
    let err = config.validate().expect_err("no token").to_string();
    assert!(err.contains("needs control.token_file"), "{err}");
}

#[test]
fn memory_limit_above_pool_is_refused() {
    let mut config = DaemonConfig::from_yaml("pool: {max_memory_mb: 64}").expect("valid");
    config.state_dir = PathBuf::from("/tmp/x");
    assert!(config.validate().is_err());
}
