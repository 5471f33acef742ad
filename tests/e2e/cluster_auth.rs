//! Who may talk to a cluster (a real `nats-server -js`): a node refuses to
//! join without authentication unless `cluster.insecure`, and then says so
//! in `status` and `doctor`; with the accounts `roostctl cluster
//! nats-config` writes, each node works with only its own user's
//! permissions (a task handed over, a control call carried, an artifact
//! published, a node drained) while a client outside the account, or
//! another node's user, can neither read a node's control subject, nor
//! answer on it, nor write the cluster's buckets.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use futures::StreamExt;
use roost_wire::api::StartRequest;
use roostd::cluster::control::{Answered, Forwarded};

use crate::a2a::{JSON, V1, http, message};
use crate::cluster::{nats, roostctl};
use crate::harness::{Daemon, TEST_CONFIG, conformance, request};
use crate::nats::{Nats, nats_binary, nats_open, nats_with_config};

/// roostd with `config` as a child: whether it exited successfully, and
/// its stderr, once it exits (within 30 s).
pub(crate) fn exits_with(config: &str) -> (bool, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("roost.yaml");
    std::fs::write(&file, config).expect("config");
    let mut child = Command::new(env!("CARGO_BIN_EXE_roostd"))
        .arg("--config")
        .arg(&file)
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .arg("--socket")
        .arg(dir.path().join("roostd.sock"))
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn roostd");
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("roostd kept running with {config}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut err)
        .expect("stderr");
    (status.success(), err)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_joins_only_authenticated_unless_insecure_and_then_says_so() {
    let Some(open) = nats_open() else { return };
    // No authentication: refused at start, naming the ways to give it.
    let bare = format!(
        "{TEST_CONFIG}cluster: {{servers: [\"{}\"], node: o}}\n",
        open.url
    );
    let (ok, err) = exits_with(&bare);
    assert!(!ok, "{err}");
    assert!(
        err.contains("cluster.nkey_file")
            && err.contains("cluster.token_file")
            && err.contains("cluster.insecure: true"),
        "{err}"
    );
    // `insecure: true` joins the same server, and every view says so.
    let insecure = Daemon::start_with(
        &format!(
            "{TEST_CONFIG}cluster: {{servers: [\"{}\"], node: o, insecure: true}}\n",
            open.url
        ),
        &[],
    )
    .await;
    let health = insecure.client.health().await.expect("health");
    let weak = health.cluster.and_then(|c| c.insecure).unwrap_or_default();
    assert!(weak.contains("no authentication to NATS"), "{weak}");
    let status = roostctl(&insecure, "status");
    assert!(status.contains("INSECURE"), "{status}");
    let doctor = roostctl(&insecure, "doctor");
    let line = doctor
        .lines()
        .find(|l| l.contains("cluster"))
        .unwrap_or_default();
    assert!(
        line.starts_with("WARN") && line.contains("no authentication"),
        "{doctor}"
    );
    drop(insecure);

    // A server that asks for a token: a wrong one does not join ...
    let Some(guarded) = nats() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let wrong = dir.path().join("wrong.token");
    std::fs::write(&wrong, "not-the-token").expect("token");
    std::fs::set_permissions(&wrong, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .expect("chmod");
    let outsider = Daemon::start_with(
        &format!(
            "{TEST_CONFIG}cluster: {{servers: [\"{}\"], token_file: \"{}\", node: w, required: false}}\n",
            guarded.url,
            wrong.display()
        ),
        &[],
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(15);
    let error = loop {
        let health = outsider.client.health().await.expect("health");
        let error = health.cluster.and_then(|c| c.error).unwrap_or_default();
        if error.contains("authorization") || Instant::now() > deadline {
            break error;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(error.contains("authorization"), "{error}");
    // ... and the right one does, with nothing to warn of (the control).
    let member = Daemon::start_with(&crate::cluster::node_config(&guarded, "m"), &[]).await;
    let health = member.client.health().await.expect("health");
    let cluster = health.cluster.expect("cluster");
    assert_eq!(cluster.insecure, None);
    assert!(cluster.nodes.iter().any(|n| n.node == "m"), "{cluster:?}");
    let doctor = roostctl(&member, "doctor");
    let line = doctor
        .lines()
        .find(|l| l.contains("cluster"))
        .unwrap_or_default();
    assert!(line.starts_with("ok"), "{doctor}");
}

/// A NATS client of `server` with node `node`'s nkey seed from `dir`.
async fn as_node(server: &Nats, dir: &Path, node: &str) -> async_nats::Client {
    let seed = std::fs::read_to_string(dir.join(format!("{node}.nk"))).expect("seed");
    async_nats::ConnectOptions::with_nkey(seed.trim().to_string())
        .custom_inbox_prefix(format!("{}.test", roostd::cluster::inbox_prefix(node)))
        .connect(&server.url)
        .await
        .expect("connect with a node's nkey")
}

/// Whether `sub` receives a message within `wait`.
async fn hears(sub: &mut async_nats::Subscriber, wait: Duration) -> bool {
    matches!(tokio::time::timeout(wait, sub.next()).await, Ok(Some(_)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_node_has_only_its_own_nats_authority_and_outsiders_none() {
    if nats_binary().is_none() {
        return;
    }
    // The accounts roostctl writes, plus an account of someone else's.
    let keys = tempfile::tempdir().expect("tempdir");
    let out = Command::new(crate::cli::roostctl())
        .args([
            "cluster",
            "nats-config",
            "--node",
            "a",
            "--node",
            "b",
            "--out",
        ])
        .arg(keys.path())
        .output()
        .expect("roostctl cluster nats-config");
    assert!(out.status.success(), "{out:?}");
    let accounts = std::fs::read_to_string(keys.path().join("roost-accounts.conf")).expect("conf");
    let server_conf = keys.path().join("server.conf");
    std::fs::write(
        &server_conf,
        accounts.replacen(
            "accounts {\n",
            "accounts {\n  OTHER { users: [{user: intruder, password: intruder}] }\n",
            1,
        ),
    )
    .expect("server conf");
    let Some(server) = nats_with_config(&server_conf) else {
        return;
    };
    let node = |name: &str| {
        format!(
            "{TEST_CONFIG}cluster: {{servers: [\"{}\"], nkey_file: \"{}\", node: {name}, node_ttl_secs: 2}}\n",
            server.url,
            keys.path().join(format!("{name}.nk")).display()
        )
    };
    let a = Daemon::start_with(&node("a"), &[]).await;
    let b = Daemon::start_with(&node("b"), &[]).await;
    let (a_addr, b_addr) = (
        a.client.health().await.expect("health").a2a_addr,
        b.client.health().await.expect("health").a2a_addr,
    );
    let dir = conformance(
        a.root.path(),
        "echo",
        "{task_acceptance: queue, after_task: sleep}",
        "",
    );
    let session = a
        .client
        .start(&StartRequest {
            name: Some("echo".into()),
            node: Some("a".into()),
            ..request(&dir)
        })
        .await
        .expect("start on a");

    // Everything a node does works with its own user: a task handed from
    // b to a (the handover, its replies, the journal) ...
    let body = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
        "params": {"message": message("auth-1", "through b")}})
    .to_string();
    let (status, _, answer) = http(&b_addr, "POST", "/a2a/echo", &[V1, JSON], &body).await;
    assert_eq!(status, 200, "{answer}\n{}", b.log());
    assert!(answer.contains("echo: through b"), "{answer}");

    // ... a control call carried from b to a, which a's user hears on its
    // own subject (the control) and b's user and an outsider do not.
    let a_user = as_node(&server, keys.path(), "a").await;
    let b_user = as_node(&server, keys.path(), "b").await;
    let intruder =
        async_nats::ConnectOptions::with_user_and_password("intruder".into(), "intruder".into())
            .connect(&server.url)
            .await
            .expect("the intruder connects to its own account");
    let mut a_hears = a_user.subscribe("roost.control.a").await.expect("sub");
    let mut b_spies = b_user.subscribe("roost.control.a").await.expect("sub");
    let mut intruder_spies = intruder.subscribe(">").await.expect("sub");
    a_user.flush().await.expect("flush");
    b_user.flush().await.expect("flush");
    intruder.flush().await.expect("flush");
    let tasks = b.client.tasks("echo").await.expect("tasks carried to a");
    assert_eq!(tasks.len(), 1, "{tasks:?}");
    let heard = tokio::time::timeout(Duration::from_secs(5), a_hears.next())
        .await
        .ok()
        .flatten()
        .expect("a's user hears the carried call");
    let heard: Forwarded = serde_json::from_slice(&heard.payload).expect("a carried call");
    assert!(
        heard.caller.contains("on node b's control socket") && heard.caller.contains("uid "),
        "{heard:?}"
    );
    assert!(!hears(&mut b_spies, Duration::from_millis(500)).await);
    assert!(!hears(&mut intruder_spies, Duration::from_millis(500)).await);

    // Asking a's control subject: b's user gets an answer (the control),
    // the intruder none.
    let call = serde_json::to_vec(
        &Forwarded::new("GET", &format!("/v1/sessions/{}", session.id), None, &[])
            .by("the test, as node b".into()),
    )
    .expect("call");
    let asked = b_user
        .request("roost.control.a", call.clone().into())
        .await
        .expect("b's user asks a");
    let answered: Answered = serde_json::from_slice(&asked.payload).expect("answer");
    assert_eq!(answered.status, 200);
    let stolen = tokio::time::timeout(
        Duration::from_secs(5),
        intruder.request("roost.control.a", call.into()),
    )
    .await;
    assert!(!matches!(stolen, Ok(Ok(_))), "the intruder got an answer");

    // The buckets: the intruder's account has none of them, and what it
    // publishes on their subjects lands nowhere.
    let theirs = async_nats::jetstream::new(intruder.clone());
    assert!(theirs.get_key_value("roost-routes").await.is_err());
    assert!(theirs.get_object_store("roost-artifacts").await.is_err());
    intruder
        .publish("$KV.roost-routes.evil", "{}".into())
        .await
        .expect("publish");
    intruder.flush().await.expect("flush");
    let js_b = async_nats::jetstream::new(b_user.clone());
    let routes = js_b.get_key_value("roost-routes").await.expect("routes");
    assert!(routes.get("evil").await.expect("get").is_none());
    // A node writes its own record in the registry, not another's.
    let js_a = async_nats::jetstream::new(a_user.clone());
    let registry = js_a.get_key_value("roost-nodes").await.expect("nodes");
    let own = registry.get("a").await.expect("get").expect("a's record");
    registry
        .put("a", own)
        .await
        .expect("a rewrites its own record");
    let b_record = registry.get("b").await.expect("get").expect("b's record");
    assert!(
        registry.put("b", b_record).await.is_err(),
        "a's user wrote b's record"
    );

    // An artifact published to the cluster, and a drain that moves the
    // session to b: both with the nodes' own users.
    let echo = crate::harness::artifact_dir(
        a.root.path(),
        crate::artifacts::ECHO,
        "component.wasm",
        &crate::artifacts::wasm("echo_tool"),
    );
    let published = Command::new(crate::cli::roostctl())
        .arg("--socket")
        .arg(&a.socket)
        .arg("publish")
        .arg(&echo)
        .arg("--cluster")
        .output()
        .expect("publish");
    assert!(published.status.success(), "{published:?}\n{}", a.log());
    let report = b
        .client
        .drain(&roost_wire::api::DrainRequest {
            node: "a".into(),
            timeout_secs: Some(10),
        })
        .await
        .expect("drain a from b");
    assert_eq!(
        report.sessions.first().and_then(|s| s.to.as_deref()),
        Some("b"),
        "{report:?}\n{}",
        a.log()
    );
    let body = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
        "params": {"message": message("auth-2", "after the drain")}})
    .to_string();
    // Until b has it running, the route says it is starting (503).
    let deadline = Instant::now() + Duration::from_secs(20);
    let (status, answer) = loop {
        let (status, _, answer) = http(&a_addr, "POST", "/a2a/echo", &[V1, JSON], &body).await;
        if status != 503 || Instant::now() > deadline {
            break (status, answer);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(status, 200, "{answer}");
    assert!(
        answer.contains("echo: after the drain"),
        "{answer}\n{}",
        b.log()
    );
}
