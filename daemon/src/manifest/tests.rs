//! Unit tests of `manifest.rs`.

use super::*;

fn capsule_dir(manifest: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("hello.wasm"), b"\0asm").expect("write");
    std::fs::write(dir.path().join(MANIFEST_FILENAME), manifest).expect("write");
    dir
}

#[test]
fn loads_a_minimal_manifest_from_its_directory() {
    let dir = capsule_dir("name: hello\nversion: 0.1.0\ncomponent: hello.wasm\n");
    let m = CapsuleManifest::load(dir.path()).expect("valid");
    assert_eq!(m.name, "hello");
    assert!(
        matches!(&m.kind, CapsuleKind::Script { component, .. } if *component == dir.path().join("hello.wasm"))
    );
    assert_eq!(m.policy.limits.timeout_secs, None);
}

#[test]
fn unknown_key_is_named() {
    let dir = capsule_dir("name: hello\nversion: 0.1.0\ncomponent: hello.wasm\ncolour: red\n");
    let err = CapsuleManifest::load(dir.path())
        .expect_err("must be refused")
        .to_string();
    assert!(err.contains("unknown field `colour`"), "{err}");
}

#[test]
fn nested_unknown_key_is_named() {
    let dir = capsule_dir(
        "name: hello\nversion: 0.1.0\ncomponent: hello.wasm\ncapabilities: {limits: {timeout: 3}}\n",
    );
    let err = CapsuleManifest::load(dir.path())
        .expect_err("must be refused")
        .to_string();
    assert!(err.contains("unknown field `timeout`"), "{err}");
}

#[test]
fn bad_name_version_and_component_are_explained() {
    for (yaml, needle) in [
        (
            "name: Hello\nversion: 0.1.0\ncomponent: hello.wasm\n",
            "`name`",
        ),
        (
            "name: hello\nversion: 1.0\ncomponent: hello.wasm\n",
            "`version`",
        ),
        (
            "name: hello\nversion: 01.0.0\ncomponent: hello.wasm\n",
            "`version`",
        ),
        (
            "name: hello\nversion: 0.1.0\ncomponent: nope.wasm\n",
            "nope.wasm, which does not exist",
        ),
        (
            "name: hello\nversion: 0.1.0\ncomponent: ../hello.wasm\n",
            "`component` names '../hello.wasm', which leaves the capsule directory",
        ),
        (
            "name: hello\nversion: 0.1.0\ncomponent: /etc/hostname\n",
            "`component` names '/etc/hostname', which leaves the capsule directory",
        ),
        (
            "name: hello\nversion: 0.1.0\ncomponent: hello.wasm\nartifacts: [{name: s, version: '1', runtime: skill, source: /etc/shadow}]\n",
            "'s': `source` names '/etc/shadow', which leaves the capsule directory",
        ),
        ("name: hello\nversion: 0.1.0\n", "`component` is required"),
        (
            "name: hello\nversion: 0.1.0\ncomponent: hello.wasm\ninference: {model: m}\n",
            "cannot be combined with `component`",
        ),
        (
            "name: hello\nversion: 0.1.0\ncomponent: hello.wasm\ntools: [a/b]\n",
            "`tools` entry 'a/b'",
        ),
        (
            "name: hello\nversion: 0.1.0\ncomponent: hello.wasm\nartifacts: [{name: e, version: 1.0, runtime: tool}]\n",
            "'e': version",
        ),
        (
            "name: hello\nversion: 0.1.0\ncomponent: hello.wasm\nartifacts: [{name: e, version: 1.0.0, runtime: tool, source: x}]\n",
            "`source` is for skills only",
        ),
        (
            "name: hello\nversion: 0.1.0\ncomponent: hello.wasm\nartifacts: [{name: e, version: 1.0.0, runtime: tool}, {name: e, version: 1.0.0, runtime: skill}]\n",
            "listed twice",
        ),
        ("name: [oops\n", "invalid"),
    ] {
        let dir = capsule_dir(yaml);
        let err = CapsuleManifest::load(dir.path())
            .expect_err("must be refused")
            .to_string();
        assert!(err.contains(needle), "{yaml:?}: {err}");
    }
}

const AGENT: &str = "name: agent\nversion: 0.1.0\n\
    artifacts:\n  - {name: drv, version: 1.0.0, runtime: driver}\n  - {name: tips, version: 1.0.0, runtime: skill}\n\
    tools: [tips]\n\
    capabilities: {network: {allow: [\"http://127.0.0.1:11434\"]}}\n\
    inference:\n  endpoint: http://127.0.0.1:11434/v1\n  model: llama3.1\n  driver: {artifact: drv, config: {stream: false}}\n";

#[test]
fn an_agent_manifest_resolves_with_defaults() {
    let dir = capsule_dir(AGENT);
    let m = CapsuleManifest::load(dir.path()).expect("valid");
    let CapsuleKind::Agent(spec) = m.kind else {
        panic!("an agent");
    };
    assert_eq!(spec.model, "llama3.1");
    assert_eq!(spec.driver_config.as_deref(), Some(r#"{"stream":false}"#));
    assert_eq!(spec.max_turns, DEFAULT_MAX_TURNS);
    assert_eq!(spec.compaction_threshold, DEFAULT_COMPACTION_THRESHOLD);
    assert_eq!(spec.context_tokens, 0);
    assert_eq!(spec.lifecycle.task_acceptance, TaskAcceptance::Single);
    assert_eq!(spec.lifecycle.after_task, AfterTask::Exit);
    assert_eq!(spec.system_prompt, SystemPrompt::None);
    assert!(!spec.trace.include_tool_output);
}

#[test]
fn agent_mistakes_name_the_field_and_the_fix() {
    for (edit, needle) in [
        (
            ("model: llama3.1", "model: ''"),
            "`inference.model` must not be empty",
        ),
        (
            ("  driver: {artifact: drv, config: {stream: false}}\n", ""),
            "`inference.driver` is required",
        ),
        (
            ("artifact: drv", "artifact: tips"),
            "listed under `artifacts:` as a skill, but must be a driver",
        ),
        (
            ("artifact: drv", "artifact: nope"),
            "'nope' is not listed under `artifacts:`",
        ),
        (
            (
                "model: llama3.1",
                "model: m\n  system_prompt_file: missing.md",
            ),
            "missing.md, which does not exist",
        ),
        (
            (
                "model: llama3.1",
                "model: m\n  system_prompt_file: ../../etc/hostname",
            ),
            "`inference.system_prompt_file` names '../../etc/hostname', which leaves",
        ),
        (
            (
                "model: llama3.1",
                "model: m\n  system_prompt_artifact: ghost",
            ),
            "`inference.system_prompt_artifact` 'ghost' is not listed",
        ),
        (
            (
                "model: llama3.1",
                "model: m\n  system_prompt: a\n  system_prompt_file: b",
            ),
            "give one of",
        ),
        (
            ("model: llama3.1", "model: m\n  max_turns: 0"),
            "`inference.max_turns` must be at least 1",
        ),
        (
            (
                "model: llama3.1",
                "model: m\n  compaction: {threshold: 1.5}",
            ),
            "1.5 must be greater than 0",
        ),
        (
            ("model: llama3.1", "model: m\n  transport: grpc"),
            "'grpc' is not supported",
        ),
        (
            ("model: llama3.1", "model: m\n  colour: red"),
            "unknown field `colour`",
        ),
        (
            ("tools: [tips]", "tools: []"),
            "does not list the skill 'tips'",
        ),
        (
            (
                "capabilities: {network",
                "capabilities: {shell: {allow: [ls]}, network",
            ),
            "does not list 'ls', which capabilities.shell.allow allows",
        ),
        (
            ("11434/v1", "9999/v1"),
            "not allowed by capabilities.network.allow",
        ),
        (
            (
                "version: 0.1.0\n",
                "version: 0.1.0\ncomponent: hello.wasm\n",
            ),
            "cannot be combined with `component`",
        ),
        (
            ("  endpoint: http://127.0.0.1:11434/v1\n", ""),
            "`inference.endpoint` is required",
        ),
    ] {
        let yaml = AGENT.replace(edit.0, edit.1);
        assert_ne!(yaml, AGENT, "edit {edit:?} did not apply");
        let dir = capsule_dir(&yaml);
        let err = CapsuleManifest::load(dir.path())
            .expect_err("must be refused")
            .to_string();
        assert!(err.contains(needle), "{edit:?}: {err}");
    }
    let script =
        "name: hello\nversion: 0.1.0\ncomponent: hello.wasm\ntrace: {include_tool_output: true}\n";
    let err = CapsuleManifest::load(capsule_dir(script).path())
        .expect_err("trace on a script")
        .to_string();
    assert!(err.contains("applies to agent capsules"), "{err}");
}

#[test]
fn an_api_key_literal_never_prints() {
    let yaml = AGENT.replace("model: llama3.1", "model: m\n  api_key: sk-very-secret");
    let m = CapsuleManifest::load(capsule_dir(&yaml).path()).expect("valid");
    assert!(!format!("{m:?}").contains("sk-very-secret"));
    let yaml = AGENT.replace("model: llama3.1", "model: m\n  api_key: {env: MY_KEY}");
    let m = CapsuleManifest::load(capsule_dir(&yaml).path()).expect("valid");
    assert!(format!("{m:?}").contains("MY_KEY"));
}

#[test]
fn missing_capsule_says_what_was_expected() {
    let err = CapsuleManifest::load(Path::new("/nonexistent/capsule"))
        .expect_err("must be refused")
        .to_string();
    assert!(
        err.contains("expected a directory containing murmur.yaml"),
        "{err}"
    );
}

#[test]
fn the_a2a_section_is_checked_and_its_description_defaults_to_the_manifests() {
    let dir = capsule_dir(
        "name: hello\nversion: 0.1.0\ncomponent: hello.wasm\ndescription: Says hello.\n\
         a2a: {skills: [{id: greet, name: Greet, description: Greets., tags: [x]}]}\n",
    );
    let m = CapsuleManifest::load(dir.path()).expect("valid");
    assert_eq!(m.card.description.as_deref(), Some("Says hello."));
    assert_eq!(m.card.skills[0].id, "greet");
    // Kept with a session and read back as it was.
    let kept = tempfile::tempdir().expect("tempdir");
    m.card.save(kept.path(), kept.path()).expect("save");
    assert_eq!(CardSpec::load(kept.path()), m.card);
    for (section, says) in [
        (
            "a2a: {skills: [{id: a, name: A}]}",
            "missing field `description`",
        ),
        ("a2a: {colour: red}", "unknown field `colour`"),
        (
            "a2a: {skills: [{id: 'a b', name: A, description: D}]}",
            "`a2a.skills[0].id` must not contain spaces",
        ),
        ("a2a: {documentation_url: docs}", "`a2a.documentation_url`"),
    ] {
        let dir = capsule_dir(&format!(
            "name: hello\nversion: 0.1.0\ncomponent: hello.wasm\n{section}\n"
        ));
        let err = CapsuleManifest::load(dir.path())
            .expect_err(section)
            .to_string();
        assert!(err.contains(says), "{section}: {err}");
    }
}

#[test]
fn the_conversation_is_kept_per_context_for_queue_agents_unless_the_manifest_says() {
    let load = |extra: &str| {
        let dir = capsule_dir(&format!("{AGENT}{extra}"));
        match CapsuleManifest::load(dir.path()).map(|m| m.kind) {
            Ok(CapsuleKind::Agent(spec)) => Ok(spec.conversation()),
            Ok(_) => panic!("an agent"),
            Err(e) => Err(e.to_string()),
        }
    };
    assert_eq!(load(""), Ok(ConversationMode::PerTask));
    assert_eq!(
        load("lifecycle: {task_acceptance: queue}\n"),
        Ok(ConversationMode::PerContext)
    );
    assert_eq!(
        load("lifecycle: {task_acceptance: queue}\ncontext: {conversation: per_task}\n"),
        Ok(ConversationMode::PerTask)
    );
    // The seed's name for it.
    assert_eq!(
        load("lifecycle: {conversation_mode: per_context}\n"),
        Ok(ConversationMode::PerContext)
    );
    let both =
        load("lifecycle: {conversation_mode: per_context}\ncontext: {conversation: per_task}\n");
    assert!(both.is_err_and(|e| e.contains("disagree")));
    let bad = load("context: {conversation: forever}\n");
    assert!(
        bad.is_err_and(|e| e.contains("per_context")),
        "names the choices"
    );
}

#[test]
fn a_kept_parse_still_checks_the_capsule_directory_and_each_directory_is_its_own() {
    // A text seen before (its parse kept, `parsed.rs`) is checked against
    // the file system on each load, as a first load is.
    let text = "name: kept\nversion: 0.1.0\ncomponent: hello.wasm\n";
    let first = capsule_dir(text);
    CapsuleManifest::load(first.path()).expect("valid");
    let second = capsule_dir(text);
    let loaded = CapsuleManifest::load(second.path()).expect("valid");
    assert!(
        matches!(&loaded.kind, CapsuleKind::Script { component, .. } if *component == second.path().join("hello.wasm")),
        "paths resolve against the directory loaded, not the one first seen"
    );
    std::fs::remove_file(second.path().join("hello.wasm")).expect("remove");
    let err = CapsuleManifest::load(second.path())
        .expect_err("its component is gone")
        .to_string();
    assert!(err.contains("`component`"), "{err}");
    // The control: the first directory, whose component is there, loads.
    CapsuleManifest::load(first.path()).expect("valid");
    // A changed text is read as changed.
    std::fs::write(
        first.path().join(MANIFEST_FILENAME),
        text.replace("0.1.0", "0.2.0"),
    )
    .expect("write");
    assert_eq!(
        CapsuleManifest::load(first.path()).expect("valid").version,
        "0.2.0"
    );
}
