//! Unit tests of `agent/mod.rs`.

use super::compaction::replacement_from_hook;
use super::turns::tool_content;
use super::*;

#[test]
fn a_continuation_is_reused_only_within_its_context() {
    let mut c = Continuation::default();
    assert_eq!(c.active("ctx_a"), None);
    c.record("cont-1".into(), "ctx_a", 2);
    assert_eq!(c.active("ctx_a"), Some(("cont-1", 2)));
    assert_eq!(c.active("ctx_b"), None, "another context must not reuse it");
    c.record("cont-2".into(), "ctx_b", 1);
    assert_eq!(c.active("ctx_a"), None);
    assert_eq!(c.active("ctx_b"), Some(("cont-2", 1)));
    c.clear();
    assert_eq!(c.active("ctx_b"), None);
}

#[test]
fn compaction_answers_are_read_as_documented() {
    let m = replacement_from_hook(r#"{"summary":"did X"}"#, "task").expect("summary");
    assert_eq!(m.len(), 1);
    assert!(m[0].content.as_deref().unwrap_or("").contains("did X"));
    let m = replacement_from_hook(
        r#"{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"}]}"#,
        "task",
    )
    .expect("messages");
    assert_eq!(m.len(), 2);
    assert!(replacement_from_hook(r#"{"messages":[]}"#, "t").is_err());
    assert!(replacement_from_hook(r#"{"other":1}"#, "t").is_err());
    let m = replacement_from_hook("plain words", "task").expect("text");
    assert!(
        m[0].content
            .as_deref()
            .unwrap_or("")
            .contains("plain words")
    );
}

#[test]
fn tool_results_tell_the_model_what_happened() {
    let out = |status, data: Option<&str>, summary: Option<&str>| ToolOutput {
        status,
        summary: summary.map(str::to_string),
        data: data.map(str::to_string),
        data_path: None,
        truncated: false,
        metadata: Vec::new(),
    };
    assert_eq!(
        tool_content(out(ToolStatus::Passed, Some("hi"), None)),
        "hi"
    );
    assert_eq!(
        tool_content(out(ToolStatus::Passed, None, Some("ok"))),
        "ok"
    );
    assert_eq!(
        tool_content(out(ToolStatus::Error, Some("trace"), Some("boom"))),
        "error (error): boom\ntrace"
    );
    let mut t = out(ToolStatus::Passed, Some("head"), None);
    t.truncated = true;
    t.data_path = Some("/x/out.txt".into());
    assert!(tool_content(t).ends_with("the full text is in /x/out.txt]"));
}

#[test]
fn a_driver_with_the_operators_key_reaches_only_its_endpoint() {
    let manifest = |key: &str| {
        let text = format!(
            "name: a\nversion: 0.1.0\n\
             artifacts:\n  - {{name: d, version: 1.0.0, runtime: driver}}\n\
             capabilities: {{network: {{allow: [\"https://api.example.com\", \"https://elsewhere.example\"]}}}}\n\
             inference: {{endpoint: \"https://api.example.com/v1\", model: m, api_key: {key}, \
             driver: {{artifact: d}}}}\n"
        );
        crate::manifest::CapsuleManifest::parse(&text, std::path::Path::new("/c/murmur.yaml"))
            .expect("manifest")
    };
    let reach = |key: &str| {
        let m = manifest(key);
        let crate::manifest::CapsuleKind::Agent(spec) = &m.kind else {
            panic!("an agent");
        };
        let policy = driver_policy(spec, &Arc::new(m.policy.clone()));
        [("api.example.com", 443), ("elsewhere.example", 443)]
            .map(|(host, port)| policy.allows_url("https", host, port))
    };
    assert_eq!(reach("{env: OPENAI_API_KEY}"), [true, false]);
    // The control: the manifest's own key goes where its policy says.
    assert_eq!(reach("sk-the-authors-own"), [true, true]);
}
