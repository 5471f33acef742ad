//! The cluster's artifact registry (`roostctl publish --cluster`, a real
//! `nats-server -js`): published through one node, resolved by another
//! whose own registry is empty, verified against sha256 as from any
//! registry, and refused with a clear error where it cannot be.

use std::process::Command;

use roost_wire::api::SessionState;

use crate::artifacts::{ECHO, invoker_capsule, wasm};
use crate::cluster::{nats, node_config};
use crate::harness::{Daemon, TEST_CONFIG, artifact_dir, code};

/// `roostctl --socket D publish DIR --cluster`: exit code, stdout, stderr.
fn publish_cluster(d: &Daemon, dir: &std::path::Path) -> (i32, String, String) {
    let out = Command::new(crate::cli::roostctl())
        .arg("--socket")
        .arg(&d.socket)
        .arg("publish")
        .arg(dir)
        .arg("--cluster")
        .output()
        .expect("roostctl publish");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_artifact_published_to_the_cluster_resolves_on_another_node() {
    let Some(nats) = nats() else { return };
    let a = Daemon::start_with(&node_config(&nats, "a"), &[]).await;
    let b = Daemon::start_with(&node_config(&nats, "b"), &[]).await;
    // Control: b's own registry does not have echo-tool, nor does the
    // cluster's yet.
    let before = invoker_capsule(b.root.path(), "before");
    let missing = b
        .client
        .start(&crate::harness::request(&before))
        .await
        .expect_err("echo-tool is nowhere yet");
    assert!(missing.to_string().contains("echo-tool"), "{missing}");
    // Published through a, into the cluster's registry.
    let echo = artifact_dir(a.root.path(), ECHO, "component.wasm", &wasm("echo_tool"));
    let (status, out, err) = publish_cluster(&a, &echo);
    assert_eq!(status, 0, "{out}{err}\n{}", a.log());
    assert!(
        out.contains("echo-tool@1.0.0") && out.contains("published"),
        "{out}"
    );
    assert!(out.contains("roost-artifacts/echo-tool/1.0.0/"), "{out}");
    let sha = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("sha256 "))
        .expect("sha256 line")
        .to_string();
    // The same bytes again change nothing; other bytes for the version
    // are refused, saying which.
    let (status, out, _) = publish_cluster(&b, &echo);
    assert_eq!(status, 0);
    assert!(out.contains("already published (same bytes)"), "{out}");
    std::fs::write(echo.join("component.wasm"), wasm("hello")).expect("other bytes");
    let (status, _, err) = publish_cluster(&a, &echo);
    assert_ne!(status, 0);
    assert!(
        err.contains("already published") || err.contains(&sha[..12]),
        "{err}"
    );
    // b's own registry is still empty: the capsule's tool comes from the
    // cluster's, and the lock pins the hash published.
    assert!(!b.state_dir.join("registry/index.json").exists());
    let dir = invoker_capsule(b.root.path(), "from-cluster");
    let started = b
        .client
        .start(&roost_wire::api::StartRequest {
            node: Some("b".into()),
            ..crate::harness::request(&dir)
        })
        .await
        .unwrap_or_else(|e| panic!("start on b: {e}\n{}", b.log()));
    let session = b.client.wait(&started.id).await.expect("wait");
    assert_eq!(
        session.state,
        SessionState::Completed,
        "{session:?}\n{}",
        b.log()
    );
    let lock = std::fs::read_to_string(dir.join("murmur.lock")).expect("lock");
    assert!(lock.contains(&sha), "{lock}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bundle_changed_in_the_clusters_bucket_is_refused_and_publish_needs_a_cluster() {
    let Some(nats) = nats() else { return };
    let a = Daemon::start_with(&node_config(&nats, "a"), &[]).await;
    let echo = artifact_dir(a.root.path(), ECHO, "component.wasm", &wasm("echo_tool"));
    let (status, out, err) = publish_cluster(&a, &echo);
    assert_eq!(status, 0, "{out}{err}");
    let object = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("roost-artifacts/"))
        .expect("object line")
        .to_string();
    // Whoever can write the bucket swaps the bundle's bytes under its name.
    let client = nats.client().await;
    let js = async_nats::jetstream::new(client);
    let bucket = js
        .get_object_store("roost-artifacts")
        .await
        .expect("bucket");
    let mut good = Vec::new();
    {
        use tokio::io::AsyncReadExt;
        let mut read = bucket.get(object.as_str()).await.expect("object");
        read.read_to_end(&mut good).await.expect("read");
    }
    let mut bad = good.clone();
    let last = bad.len() - 30;
    bad[last] ^= 0xff;
    bucket
        .put(object.as_str(), &mut bad.as_slice())
        .await
        .expect("tamper");
    let dir = invoker_capsule(a.root.path(), "tampered");
    let err = a
        .client
        .start(&crate::harness::request(&dir))
        .await
        .expect_err("tampered");
    assert_eq!(code(&err), "integrity_failed", "{err}");
    assert!(!dir.join("murmur.lock").exists());
    // Control: the bytes put back, the same capsule starts.
    bucket
        .put(object.as_str(), &mut good.as_slice())
        .await
        .expect("restore");
    let session = a.run_to_end(&dir).await;
    assert_eq!(session.state, SessionState::Completed, "{session:?}");
    // An index entry naming a bundle outside the registry's layout is
    // refused as in any registry's index: the cluster's registry is not
    // read (the log says why), and the capsule's tool is not found.
    let index = js
        .get_key_value("roost-artifact-index")
        .await
        .expect("index");
    let evil = serde_json::json!({
        "name": "evil", "version": "1.0.0", "runtime": "tool",
        "bundles": [{"platform": "any", "path": "../../../etc/passwd",
                     "sha256": "0".repeat(64), "size": 1}],
    });
    index
        .put("evil/1.0.0", evil.to_string().into())
        .await
        .expect("evil entry");
    let again = invoker_capsule(a.root.path(), "after-evil");
    let err = a
        .client
        .start(&crate::harness::request(&again))
        .await
        .expect_err("the cluster's index is refused");
    assert!(err.to_string().contains("echo-tool"), "{err}");
    assert!(a.log().contains("not a plain relative path"), "{}", a.log());
    // One host without `cluster:`: --cluster is a clear refusal.
    let alone = Daemon::start_with(TEST_CONFIG, &[]).await;
    let (status, _, err) = publish_cluster(&alone, &echo);
    assert_ne!(status, 0);
    assert!(err.contains("not a node of one"), "{err}");
}
