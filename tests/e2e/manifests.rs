//! Malformed manifests and start requests: a clear error, and no row created.

use roost_ctl::api::StartRequest;

use crate::harness::{Daemon, code, guest, request};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_manifests_are_explained_and_create_nothing() {
    let d = Daemon::start().await;
    // Each case's directory holds the component; the manifest names it.
    let wasm = "hello.wasm";
    let outside = guest("hello").display().to_string();
    let cases: Vec<(String, &str)> = vec![
        (
            "name: hello\nversion: 0.1.0\ncomponent: [unclosed\n".into(),
            "invalid",
        ),
        (
            format!("name: hello\nversion: 0.1.0\ncomponent: {wasm}\nbogus: 1\n"),
            "unknown field `bogus`",
        ),
        (
            format!("name: Hello!\nversion: 0.1.0\ncomponent: {wasm}\n"),
            "`name`",
        ),
        (
            format!("name: hello\nversion: one\ncomponent: {wasm}\n"),
            "`version`",
        ),
        (
            "name: hello\nversion: 0.1.0\ncomponent: missing.wasm\n".into(),
            "missing.wasm, which does not exist",
        ),
        (
            format!("name: hello\nversion: 0.1.0\ncomponent: {outside}\n"),
            "leaves the capsule directory",
        ),
        (
            format!(
                "name: hello\nversion: 0.1.0\ncomponent: {wasm}\ncapabilities: {{network: {{allow: [\"example.com\"]}}}}\n"
            ),
            "network.allow entry 'example.com'",
        ),
        (
            format!(
                "name: hello\nversion: 0.1.0\ncomponent: {wasm}\ncapabilities: {{limits: {{memory_mb: 100000}}}}\n"
            ),
            "pool.max_memory_mb",
        ),
        ("".into(), "invalid"),
    ];
    for (i, (yaml, needle)) in cases.iter().enumerate() {
        let dir = d.root.path().join(format!("bad-{i}"));
        std::fs::create_dir(&dir).expect("dir");
        crate::harness::inside(&dir, &guest("hello"));
        std::fs::write(dir.join("murmur.yaml"), yaml).expect("write");
        let err = d.client.start(&request(&dir)).await.expect_err("refused");
        let text = err.to_string();
        assert!(
            text.contains(needle),
            "case {i}: expected '{needle}' in: {text}"
        );
        assert!(
            matches!(code(&err), "invalid_manifest" | "limit_too_high"),
            "case {i}: {text}"
        );
    }
    // A component that is not WebAssembly.
    let dir = capsule_with(d.root.path(), "junk", |path| {
        std::fs::write(path, b"definitely not wasm")
    });
    let err = d.client.start(&request(&dir)).await.expect_err("refused");
    assert_eq!(code(&err), "invalid_component", "{err}");

    // A component too large to read is refused before it is read (sparse file).
    let dir = capsule_with(d.root.path(), "huge", |path| {
        std::fs::File::create(path).and_then(|f| f.set_len(300 << 20))
    });
    let err = d.client.start(&request(&dir)).await.expect_err("refused");
    assert_eq!(code(&err), "invalid_component", "{err}");
    assert!(
        err.to_string().contains("components may be at most"),
        "{err}"
    );

    let missing = d
        .client
        .start(&request(&d.root.path().join("nowhere")))
        .await
        .expect_err("missing capsule");
    assert!(
        missing
            .to_string()
            .contains("expected a directory containing murmur.yaml")
    );
    let relative = d
        .client
        .start(&StartRequest {
            path: "relative/capsule".into(),
            ..StartRequest::default()
        })
        .await
        .expect_err("relative");
    assert_eq!(code(&relative), "bad_request");
    let no_workdir = d
        .client
        .start(&StartRequest {
            workdir: Some(d.root.path().join("no-such-dir").display().to_string()),
            ..request(&d.root.path().join("junk"))
        })
        .await
        .expect_err("workdir must exist");
    assert_eq!(code(&no_workdir), "invalid_workdir");

    assert!(
        d.client.list(true).await.expect("list").is_empty(),
        "no rows created"
    );
}

/// A capsule dir `<root>/<name>` whose component `<name>.wasm` is made by `write`.
fn capsule_with(
    root: &std::path::Path,
    name: &str,
    write: impl FnOnce(&std::path::Path) -> std::io::Result<()>,
) -> std::path::PathBuf {
    let dir = root.join(name);
    std::fs::create_dir(&dir).expect("dir");
    write(&dir.join(format!("{name}.wasm"))).expect("component file");
    std::fs::write(
        dir.join("murmur.yaml"),
        format!("name: {name}\nversion: 0.1.0\ncomponent: {name}.wasm\n"),
    )
    .expect("write manifest");
    dir
}
