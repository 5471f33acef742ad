//! What a capsule can make roostd read or hand over of this host: the files
//! its manifest names stay inside its directory (no absolute path, no `..`,
//! no symlink), its `capabilities.filesystem` grants stay clear of roostd's
//! own state and of system trees, and a session staged with WASM tools only
//! cannot pull a native tool at run time. Each refusal has its control: the
//! same capsule with an ordinary file, directory or staging succeeds.

use std::path::Path;

use roost_ctl::api::{SessionState, StartRequest};

use crate::harness::{
    Daemon, TEST_CONFIG, artifact_dir, capsule, code, conformance, publish, request,
};

const SECRET: &str = "TOP-SECRET-7731-not-for-capsules";

/// A conformance capsule (it serves tasks) with a local skill `notes` whose
/// `source` is `source`.
fn with_skill(root: &Path, name: &str, source: &str) -> std::path::PathBuf {
    conformance(
        root,
        name,
        "{task_acceptance: queue, after_task: sleep}",
        &format!(
            "artifacts:\n  - {{name: notes, version: local, runtime: skill, source: \"{source}\"}}\n\
             tools: [notes]\n"
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manifest_reads_only_files_inside_its_capsule() {
    let daemon = Daemon::start().await;
    let root = daemon.root.path();
    let secret = root.join("secret.md");
    std::fs::write(&secret, SECRET).expect("secret");

    // By spelling: absolute, and `..` out of the capsule.
    for (name, source) in [
        ("abs", secret.display().to_string()),
        ("up", "../secret.md".to_string()),
    ] {
        let dir = with_skill(root, name, &source);
        let err = daemon.client.start(&request(&dir)).await.expect_err(name);
        assert!(
            err.to_string().contains("leaves the capsule directory"),
            "{name}: {err}"
        );
        assert_eq!(code(&err), "invalid_manifest", "{err}");
    }
    // By a link the capsule ships: to the file, and to a directory on the
    // way.
    let linked = with_skill(root, "linked", "notes.md");
    std::os::unix::fs::symlink(&secret, linked.join("notes.md")).expect("link");
    let via = with_skill(root, "via", "docs/notes.md");
    std::os::unix::fs::symlink(root, via.join("docs")).expect("link");
    std::fs::copy(&secret, root.join("notes.md")).expect("bait");
    for (dir, file) in [(&linked, "notes.md"), (&via, "docs/notes.md")] {
        let err = daemon.client.start(&request(dir)).await.expect_err("link");
        assert!(err.to_string().contains("symlink"), "{err}");
        assert!(!err.to_string().contains(SECRET), "{err}");
        let followed = std::fs::read_to_string(dir.join(file)).expect("follow the link");
        assert!(
            followed.contains(SECRET),
            "the control: following the link reads the secret"
        );
    }
    // The component itself, a link out of the capsule.
    let component = capsule(root, "component-link", "hello", "");
    let wasm = component.join("hello.wasm");
    let real = root.join("elsewhere.wasm");
    std::fs::rename(&wasm, &real).expect("move the component out");
    std::os::unix::fs::symlink(&real, &wasm).expect("link");
    let err = daemon
        .client
        .start(&request(&component))
        .await
        .expect_err("component link");
    assert!(err.to_string().contains("symlink"), "{err}");
    // murmur.yaml itself a link.
    let yaml = capsule(root, "yaml-link", "hello", "");
    std::fs::rename(yaml.join("murmur.yaml"), root.join("moved.yaml")).expect("move");
    std::os::unix::fs::symlink(root.join("moved.yaml"), yaml.join("murmur.yaml")).expect("link");
    let err = daemon
        .client
        .start(&request(&yaml))
        .await
        .expect_err("yaml");
    assert!(err.to_string().contains("symlink"), "{err}");

    // The control: the same text as an ordinary file inside the capsule.
    let plain = with_skill(root, "plain", "notes.md");
    std::fs::write(plain.join("notes.md"), "# Notes\nordinary\n").expect("notes");
    daemon.client.start(&request(&plain)).await.expect("plain");
    let component_ok = capsule(root, "component-ok", "hello", "");
    let s = daemon
        .client
        .start(&request(&component_ok))
        .await
        .expect("an ordinary component");
    let s = daemon.client.wait(&s.id).await.expect("wait");
    assert_eq!(s.state, SessionState::Completed, "{s:?}");
    assert!(
        !daemon.log().contains(SECRET),
        "the secret never reached the log"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filesystem_grants_never_reach_roostds_own_state_or_system_trees() {
    use std::os::unix::fs::PermissionsExt;
    let secrets = tempfile::tempdir().expect("secrets");
    let token = secrets.path().join("a2a.token");
    std::fs::write(&token, "a2a-grant-test-token-0123456789").expect("token");
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let config = format!(
        "{TEST_CONFIG}a2a: {{token_file: \"{}\"}}\nfilesystem: {{allow: [/usr/share]}}\n",
        token.display()
    );
    let daemon = Daemon::start_with(&config, &[]).await;
    let root = daemon.root.path();
    let alias = root.join("alias");
    std::os::unix::fs::symlink(&daemon.state_dir, &alias).expect("link");
    let grant = |name: &str, field: &str, path: &Path| {
        capsule(
            root,
            name,
            "hello",
            &format!(
                "capabilities: {{filesystem: {{{field}: [\"{}\"]}}}}\n",
                path.display()
            ),
        )
    };
    for (name, field, path, says) in [
        ("state", "read_only", daemon.state_dir.clone(), "state dir"),
        (
            "keys",
            "read_write",
            daemon.state_dir.join("keys"),
            "state dir",
        ),
        ("alias", "read_only", alias.clone(), "passes through a link"),
        (
            "sock",
            "read_write",
            daemon.socket.parent().expect("dir").to_path_buf(),
            "control socket",
        ),
        (
            "config",
            "read_only",
            root.join("roost.yaml"),
            "config file",
        ),
        ("token", "read_only", token.clone(), "a2a.token_file"),
        ("slash", "read_only", "/".into(), "overlaps"),
        ("etc", "read_only", "/etc".into(), "system tree /etc"),
        ("run", "read_only", "/run".into(), "system tree /run"),
        ("proc", "read_write", "/proc/1".into(), "system tree /proc"),
    ] {
        let dir = grant(name, field, &path);
        let err = daemon.client.start(&request(&dir)).await.expect_err(name);
        assert!(err.to_string().contains(says), "{name}: {err}");
        assert_eq!(code(&err), "invalid_manifest", "{err}");
    }
    // A workdir is held to the same rule.
    let dir = capsule(root, "wd", "hello", "");
    let err = daemon
        .client
        .start(&StartRequest {
            workdir: Some(daemon.state_dir.display().to_string()),
            ..request(&dir)
        })
        .await
        .expect_err("the state dir as a workdir");
    assert!(err.to_string().contains("state dir"), "{err}");

    // The controls: a directory of the operator's, and a system path the
    // operator allowed; beside the control socket, a directory for writing
    // and the socket's own directory for reading (neither can replace it).
    let data = tempfile::tempdir().expect("data");
    let beside = daemon.socket.parent().expect("dir").join("beside");
    std::fs::create_dir_all(&beside).expect("beside the socket");
    let socket_dir = daemon.socket.parent().expect("dir").to_path_buf();
    for (name, field, path) in [
        ("data", "read_only", data.path()),
        ("share", "read_only", Path::new("/usr/share")),
        ("beside", "read_write", beside.as_path()),
        ("sockread", "read_only", socket_dir.as_path()),
    ] {
        let dir = grant(name, field, path);
        let s = daemon.client.start(&request(&dir)).await.expect(name);
        let s = daemon.client.wait(&s.id).await.expect("wait");
        assert_eq!(s.state, SessionState::Completed, "{name}: {s:?}");
    }
    // A workdir beside the socket, as under `roostd --socket /tmp/roostd.sock`.
    let dir = capsule(root, "wd-beside", "hello", "");
    let s = daemon
        .client
        .start(&StartRequest {
            workdir: Some(beside.display().to_string()),
            ..request(&dir)
        })
        .await
        .expect("a workdir beside the control socket");
    let s = daemon.client.wait(&s.id).await.expect("wait");
    assert_eq!(s.state, SessionState::Completed, "{s:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_staged_wasm_only_cannot_pull_a_native_tool() {
    let daemon = Daemon::start().await;
    let registry = daemon.state_dir.join("registry");
    let tool = artifact_dir(
        daemon.root.path(),
        "name: envdump\nversion: 1.0.0\nruntime: tool\nimplementation: native\n\
         description: Print its input\n",
        "envdump",
        b"#!/bin/sh\necho \"input=$(cat)\"\n",
    );
    assert!(publish(&registry, &tool).await.contains("published"));
    // The puller guest, in its capsule dir as its workdir: what it said.
    let pull = async |name: &str, extra: &str| {
        let dir = capsule(
            daemon.root.path(),
            name,
            "puller",
            &format!("tools: [envdump]\n{extra}"),
        );
        std::fs::write(dir.join("pull.txt"), "envdump 1.0.0").expect("pull.txt");
        let s = daemon
            .client
            .start(&StartRequest {
                workdir: Some(dir.display().to_string()),
                ..request(&dir)
            })
            .await
            .expect("start");
        let s = daemon.client.wait(&s.id).await.expect("wait");
        let said = std::fs::read_to_string(Path::new(&s.workdir).join("pulled.txt"));
        (dir, said.expect("pulled.txt"))
    };
    // Staged WASM-only: the pull is refused, and nothing is installed.
    let (dir, said) = pull("wasm-only", "").await;
    assert!(
        said.starts_with("error:") && said.contains("WASM tools only"),
        "{said}"
    );
    assert!(
        !dir.join(".murmur/tools/envdump").exists(),
        "nothing installed"
    );
    // The control: staged as one that runs native tools, the same pull runs
    // the tool (in the jail that staging chose for it).
    let (_, said) = pull("native", "capabilities: {shell: {allow: [sh]}}\n").await;
    assert!(
        said.starts_with("ok: input=") && said.contains("\"pulled\""),
        "{said}"
    );
}

/// Runs the `shellrun` guest's `sh` tool with `command` in `workdir`, with
/// `caps` (a `capabilities:` body); its result's data.
async fn shell(daemon: &Daemon, name: &str, workdir: &Path, command: &str, caps: &str) -> String {
    let dir = capsule(
        daemon.root.path(),
        name,
        "shellrun",
        &format!("tools: [sh]\ncapabilities: {{shell: {{allow: [sh]}}{caps}}}\n"),
    );
    std::fs::write(workdir.join("shell-tool.txt"), "sh").expect("tool");
    std::fs::write(workdir.join("shell-command.txt"), command).expect("command");
    let s = daemon
        .client
        .start(&StartRequest {
            workdir: Some(workdir.display().to_string()),
            ..request(&dir)
        })
        .await
        .expect("start");
    daemon.client.wait(&s.id).await.expect("wait");
    let result = std::fs::read_to_string(workdir.join("shell-result.json")).expect("result");
    let v: serde_json::Value = serde_json::from_str(&result).expect("json");
    v["data"].as_str().unwrap_or_default().to_string()
}

/// Under a root roostd, a session's tool uid is opened to its grants with
/// ACL entries; when the session ends they are taken back, so a later
/// session of the same uid (the same workdir) that was not granted the tree
/// cannot read it. The control: while granted, the tool reads it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_uids_acl_entries_end_with_its_session() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("roostd is not root here: no tool uids, no ACL entries; skipped");
        return;
    }
    let daemon = Daemon::start().await;
    let private = tempfile::tempdir().expect("private");
    let secret = private.path().join("secret.txt");
    std::fs::write(&secret, SECRET).expect("secret");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        std::fs::set_permissions(private.path(), std::fs::Permissions::from_mode(0o700))
            .expect("chmod");
    }
    let workdir = tempfile::tempdir().expect("workdir");
    let read = format!("id -u; cat {} || echo denied", secret.display());
    let granted = format!(
        ", filesystem: {{read_only: [\"{}\"]}}",
        private.path().display()
    );
    // The control: granted, the tool reads it.
    let first = shell(&daemon, "granted", workdir.path(), &read, &granted).await;
    assert!(first.contains(SECRET), "the grant works: {first}");
    let uid: u32 = first
        .lines()
        .skip_while(|l| !l.starts_with("Stdout:"))
        .nth(1)
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or_else(|| panic!("the tool's uid: {first}"));
    use roostd::sandbox::identity::has_user_entry;
    assert!(
        !has_user_entry(&secret, uid).expect("acl"),
        "taken back at the end"
    );
    assert!(!has_user_entry(private.path(), uid).expect("acl"));
    // The attack: the same uid later, not granted the tree.
    let second = shell(&daemon, "not-granted", workdir.path(), &read, "").await;
    assert!(second.contains(&format!("{uid}")), "the same uid: {second}");
    assert!(
        !second.contains(SECRET) && second.contains("denied"),
        "{second}"
    );
}
