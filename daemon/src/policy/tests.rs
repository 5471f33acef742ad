//! Unit tests of `policy.rs`.

#[test]
fn extra_filesystem_paths_are_validated() {
    let caps = |yaml: &str| -> Capabilities { serde_yaml::from_str(yaml).expect("yaml") };
    for (yaml, needle) in [
        (
            "filesystem: {read_only: [relative/dir]}",
            "must be an absolute path",
        ),
        (
            "filesystem: {read_write: [/tmp/../etc]}",
            "must not contain '..'",
        ),
        (
            "filesystem: {read_only: [/nonexistent/roost/x]}",
            "does not exist",
        ),
        (
            "limits: {processes: 0}",
            "limits.processes must be at least 1",
        ),
    ] {
        let err = CapabilityPolicy::from_manifest(caps(yaml))
            .expect_err(yaml)
            .to_string();
        assert!(err.contains(needle), "{yaml}: {err}");
    }
    let ok = CapabilityPolicy::from_manifest(caps(
        "filesystem: {read_only: [/usr], read_write: [/tmp]}",
    ))
    .expect("valid");
    assert_eq!(ok.read_only, [std::path::PathBuf::from("/usr")]);
}

use super::*;

#[test]
fn redacted_urls_lose_credentials_and_keep_the_rest() {
    assert_eq!(
        redact_url("https://user:tok@api.example.com:8443/v1/chat?key=sk-1#x"),
        "https://api.example.com:8443/v1/chat?<redacted>"
    );
    assert_eq!(redact_url("http://127.0.0.1:9/v1"), "http://127.0.0.1:9/v1");
    assert_eq!(redact_url("http://h?k=v"), "http://h?<redacted>");
}

#[test]
fn driver_errors_lose_the_endpoints_credentials_and_the_key() {
    let endpoint = "https://bob:pw-1234@api.example.com/v1?key=sk-query&region=eu-west";
    let config = r#"{"headers": {"X-Api-Key": "hdr-secret-1"}, "model_alias": "fast-model"}"#;
    let error = "POST https://bob:pw-1234@api.example.com/v1/chat/completions?region=eu-west\
                 &key=sk-query failed (Authorization: Bearer sk-header; X-Api-Key: \
                 hdr-secret-1; model fast-model)";
    let out = redact_secrets(error, Some(endpoint), Some("sk-header"), Some(config));
    for secret in ["sk-query", "bob", "pw-1234", "sk-header", "hdr-secret-1"] {
        assert!(!out.contains(secret), "{secret} in {out}");
    }
    assert!(
        out.contains("https://api.example.com/v1/chat/completions?"),
        "{out}"
    );
    assert!(
        out.contains("fast-model"),
        "what is not a credential stays: {out}"
    );
    let plain = "connection refused: http://127.0.0.1:9/v1";
    assert_eq!(
        redact_secrets(plain, Some("http://127.0.0.1:9/v1"), None, None),
        plain
    );
}

fn policy(rules: &[&str]) -> CapabilityPolicy {
    CapabilityPolicy::from_manifest(Capabilities {
        network: NetworkSection {
            allow: rules.iter().map(|s| s.to_string()).collect(),
            unix_sockets: false,
        },
        ..Capabilities::default()
    })
    .expect("valid rules")
}

#[test]
fn empty_allow_list_denies_everything() {
    let p = policy(&[]);
    assert!(!p.allows_url("http", "127.0.0.1", 80));
    assert!(!p.allows_url("https", "example.com", 443));
}

#[test]
fn rules_match_scheme_host_and_port() {
    let p = policy(&[
        "https://api.example.com",
        "http://127.0.0.1:*",
        "*://*.internal:8080",
    ]);
    assert!(p.allows_url("https", "api.example.com", 443));
    assert!(!p.allows_url("https", "api.example.com", 8443));
    assert!(!p.allows_url("http", "api.example.com", 80));
    assert!(!p.allows_url("https", "evil.example.com", 443));
    assert!(p.allows_url("http", "127.0.0.1", 4567));
    assert!(!p.allows_url("https", "127.0.0.1", 4567));
    assert!(p.allows_url("https", "db.internal", 8080));
    assert!(!p.allows_url("https", "internal", 8080));
}

#[test]
fn ipv6_literals_parse_and_match() {
    let p = policy(&["http://[::1]:8080"]);
    assert!(p.allows_url("http", "[::1]", 8080));
    assert!(p.allows_url("http", "::1", 8080));
}

#[test]
fn malformed_rules_are_named() {
    for bad in [
        "api.example.com",
        "ftp://x",
        "http://*x.com",
        "http://h:99999",
        "http://h/path",
        "http://",
    ] {
        let err = NetworkRule::parse(bad)
            .expect_err("must be refused")
            .to_string();
        assert!(err.contains(bad), "{bad}: {err}");
    }
}

#[test]
fn credential_shaped_env_names_are_refused() {
    for name in [
        "OPENAI_API_KEY",
        "GITHUB_TOKEN",
        "DB_PASSWORD",
        "AWS_SECRET_ACCESS_KEY",
        "SSH_KEY",
    ] {
        let caps = Capabilities {
            env: EnvSection {
                allow: vec![name.into()],
            },
            ..Capabilities::default()
        };
        let err = CapabilityPolicy::from_manifest(caps)
            .expect_err("must be refused")
            .to_string();
        assert!(err.contains(name) && err.contains("credential"), "{err}");
    }
    let caps = Capabilities {
        env: EnvSection {
            allow: vec!["RUST_LOG".into()],
        },
        ..Capabilities::default()
    };
    let p = CapabilityPolicy::from_manifest(caps).expect("valid");
    let env = p.guest_env(|n| (n == "RUST_LOG").then(|| "debug".to_string()));
    assert_eq!(env, vec![("RUST_LOG".to_string(), "debug".to_string())]);
}

#[test]
fn murmur_names_are_reserved() {
    let caps = Capabilities {
        env: EnvSection {
            allow: vec!["MURMUR_SESSION_ID".into()],
        },
        ..Capabilities::default()
    };
    assert!(CapabilityPolicy::from_manifest(caps).is_err());
}
