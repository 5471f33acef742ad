//! Capsules' messages to peers elsewhere (`murmur:message/send`), against the
//! official Python SDK's server: the seed's `host:port` names a peer, roostd
//! adds the token its config has for the peer (the control: the same send
//! without it is refused by the peer), and a peer whose card says 0.3 is
//! spoken to in 0.3; `murmur:peer/call` waits for the answer of a peer on
//! the same daemon, of the SDK's server, and of another roostd whose route
//! takes only its own token.

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::a2a::{message, rpc};
use crate::a2a_script::sdk_python;
use crate::harness::{Daemon, TEST_CONFIG, conformance, repo, request};

const SERVE: &str = "{task_acceptance: queue, after_task: sleep}";
const TOKEN: &str = "peer-token-0123456789abcdef";

/// The SDK's server on a free loopback port, killed when dropped.
pub(crate) struct SdkPeer {
    _child: tokio::process::Child,
    pub(crate) port: u16,
}

impl SdkPeer {
    pub(crate) async fn start(args: &[&str]) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let child = tokio::process::Command::new(sdk_python())
            .arg(repo().join("benches/a2a_sdk/server.py"))
            .args(["--port", &port.to_string()])
            .args(args)
            .stdout(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("the SDK server");
        let deadline = Instant::now() + Duration::from_secs(60);
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            assert!(Instant::now() < deadline, "the SDK server did not come up");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Self {
            _child: child,
            port,
        }
    }
}

/// roostd with `extra` config, and a conformance capsule `sender` that may
/// reach the peer (by address and by name).
async fn sender(extra: &str, port: u16) -> (Daemon, String) {
    let daemon = Daemon::start_with(&format!("{TEST_CONFIG}{extra}"), &[]).await;
    let addr = daemon.client.health().await.expect("health").a2a_addr;
    let network = format!(
        "capabilities:\n  network:\n    allow: [\"http://127.0.0.1:{port}\", \"http://localhost:{port}\"]\n"
    );
    let dir = conformance(daemon.root.path(), "sender", SERVE, &network);
    daemon.client.start(&request(&dir)).await.expect("start");
    (daemon, addr)
}

/// What the sender's `forward <peer> <text>` task ended with: its state
/// and its answer or error.
async fn forward(addr: &str, id: &str, peer: &str) -> (String, String) {
    let r = rpc(
        addr,
        "sender",
        Some("1.0"),
        "SendMessage",
        json!({"message": message(id, &format!("forward {peer} hello peer"))}),
    )
    .await;
    let task = &r["result"]["task"];
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let said = match task["artifacts"][0]["parts"][0]["text"].as_str() {
        Some(answer) => answer.to_string(),
        None => text(&task["status"]["message"]["parts"][0]["text"]),
    };
    (text(&task["status"]["state"]), said)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_named_by_host_and_port_gets_the_token_roostd_has_for_it() {
    let peer = SdkPeer::start(&["--token", TOKEN]).await;
    let secrets = tempfile::tempdir().expect("tempdir");
    let token_file = secrets.path().join("peer.token");
    std::fs::write(&token_file, TOKEN).expect("token");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let config = format!(
        "a2a: {{peers: [{{url: \"http://127.0.0.1:{}/\", token_file: \"{}\"}}]}}\n",
        peer.port,
        token_file.display()
    );
    let (daemon, addr) = sender(&config, peer.port).await;

    // The seed's host:port, with the token: the SDK server takes the task.
    let (state, said) = forward(&addr, "p-1", &format!("127.0.0.1:{}", peer.port)).await;
    assert_eq!(state, "TASK_STATE_COMPLETED", "{said}\n{}", daemon.log());
    let words: Vec<&str> = said.split_whitespace().collect();
    assert_eq!(words.first(), Some(&"sent"), "{said}");
    assert!(
        matches!(words.get(2), Some(&("submitted" | "working" | "completed"))),
        "{said}"
    );

    // The control: the same peer by a name no a2a.peers entry covers gets
    // no token, and the peer refuses the message.
    let (state, said) = forward(&addr, "p-2", &format!("http://localhost:{}/", peer.port)).await;
    assert_eq!(state, "TASK_STATE_FAILED", "{said}");
    assert!(said.contains("401") && said.contains("a2a.peers"), "{said}");
    assert!(!daemon.log().contains(TOKEN), "the token is never logged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_whose_card_says_0_3_is_sent_0_3s_message_send() {
    let peer = SdkPeer::start(&["--protocol-version", "0.3"]).await;
    let (daemon, addr) = sender("", peer.port).await;
    let url = format!("http://127.0.0.1:{}/", peer.port);
    let (state, said) = forward(&addr, "v-1", &url).await;
    assert_eq!(state, "TASK_STATE_COMPLETED", "{said}\n{}", daemon.log());
    assert!(said.starts_with("sent "), "{said}");
    assert!(
        daemon
            .log()
            .lines()
            .any(|l| l.contains("A2A message taken by a peer elsewhere")
                && l.contains("dialect=\"0.3\"")),
        "{}",
        daemon.log()
    );
    // A 1.0 peer is spoken to in 1.0.
    let v1 = SdkPeer::start(&[]).await;
    let (daemon, addr) = sender("", v1.port).await;
    let (state, said) = forward(&addr, "v-2", &format!("127.0.0.1:{}", v1.port)).await;
    assert_eq!(state, "TASK_STATE_COMPLETED", "{said}");
    assert!(daemon.log().contains("dialect=\"1.0\""), "{}", daemon.log());
}

/// The caller's task `call <peer> <secs> <text>`, streamed: its answer (or
/// error) and the working status messages it showed meanwhile.
pub(crate) async fn call(addr: &str, id: &str, what: &str) -> (String, String, Vec<String>) {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": {
        "message": message(id, &format!("call {what}"))}})
    .to_string();
    let (status, _, body) = crate::a2a::http(
        addr,
        "POST",
        "/a2a/caller",
        &[crate::a2a::V1, crate::a2a::JSON],
        &body,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let events = crate::a2a::sse_events(&body);
    let statuses: Vec<&Value> = events
        .iter()
        .filter_map(|e| e["result"].get("statusUpdate"))
        .map(|u| &u["status"])
        .collect();
    let shown: Vec<String> = statuses
        .iter()
        .filter(|s| s["state"] == "TASK_STATE_WORKING")
        .filter_map(|s| s["message"]["parts"][0]["text"].as_str())
        .map(str::to_string)
        .collect();
    let last = statuses.last().expect("a final status");
    let answer: String = events
        .iter()
        .rev()
        .find_map(|e| e["result"]["artifactUpdate"]["artifact"]["parts"][0]["text"].as_str())
        .unwrap_or_else(|| {
            last["message"]["parts"][0]["text"]
                .as_str()
                .unwrap_or_default()
        })
        .to_string();
    (
        last["state"].as_str().unwrap_or_default().to_string(),
        answer,
        shown,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_waits_for_the_peers_answer_here_and_elsewhere_and_shows_what_it_streams() {
    let sdk = SdkPeer::start(&[]).await;
    let daemon = Daemon::start_with(TEST_CONFIG, &[]).await;
    let addr = daemon.client.health().await.expect("health").a2a_addr;
    let receiver = conformance(daemon.root.path(), "receiver", SERVE, "");
    daemon
        .client
        .start(&request(&receiver))
        .await
        .expect("receiver");
    let caller = crate::harness::capsule(
        daemon.root.path(),
        "caller",
        "caller",
        &format!(
            "lifecycle: {{task_acceptance: queue, after_task: sleep, concurrency: 4}}\n\
             capabilities:\n  network:\n    allow: [\"http://{addr}\", \"http://127.0.0.1:{}\"]\n",
            sdk.port
        ),
    );
    daemon
        .client
        .start(&request(&caller))
        .await
        .expect("caller");

    // A peer on this daemon: its answer (what it streams is shown only if
    // it streams after the call has begun to follow it: this one answers
    // at once).
    let (state, answer, _) = call(
        &addr,
        "c-1",
        &format!("http://{addr}/a2a/receiver 20 hello"),
    )
    .await;
    assert_eq!(state, "TASK_STATE_COMPLETED", "{answer}");
    assert_eq!(answer, "completed: echo: hello");

    // The SDK's server, by host:port: five ticks streamed, then the answer.
    let (state, answer, shown) =
        call(&addr, "c-2", &format!("127.0.0.1:{} 20 slow", sdk.port)).await;
    assert_eq!(state, "TASK_STATE_COMPLETED", "{answer}\n{}", daemon.log());
    assert_eq!(answer, "completed: echo: slow");
    for tick in 1..=5 {
        assert!(
            shown.concat().contains(&format!("tick {tick}")),
            "{shown:?}"
        );
    }
    // A peer that asks a question: the wait is over, with the question.
    let (_, answer, _) = call(&addr, "c-3", &format!("127.0.0.1:{} 20 ask", sdk.port)).await;
    assert_eq!(answer, "input-required: what next?");
    // A peer slower than the wait: the error names its task.
    let (state, answer, _) = call(&addr, "c-4", &format!("127.0.0.1:{} 1 sleep", sdk.port)).await;
    assert_eq!(state, "TASK_STATE_FAILED", "{answer}");
    assert!(answer.contains("did not end within 1 s"), "{answer}");
}

/// A token file (0600) holding `token`.
fn token_file(dir: &std::path::Path, name: &str, token: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, token).expect("token");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_roostd_takes_sends_and_calls_with_the_route_token_roostd_has_for_it() {
    let secrets = tempfile::tempdir().expect("tempdir");
    let route_token = "receiver-route-token-0123456789";
    // The far daemon: its route takes only its own token.
    let far_token = token_file(secrets.path(), "route.token", route_token);
    let far = Daemon::start_with(
        &format!(
            "{TEST_CONFIG}a2a: {{routes: {{receiver: {{token_file: \"{}\"}}}}}}\n",
            far_token.display()
        ),
        &[],
    )
    .await;
    let far_addr = far.client.health().await.expect("health").a2a_addr;
    let receiver = conformance(far.root.path(), "receiver", SERVE, "");
    far.client
        .start(&request(&receiver))
        .await
        .expect("receiver");

    // The near daemon has the token for that route.
    let near_token = token_file(secrets.path(), "peer.token", route_token);
    let near = Daemon::start_with(
        &format!(
            "{TEST_CONFIG}a2a: {{peers: [{{url: \"http://{far_addr}/a2a/receiver\", token_file: \"{}\"}}]}}\n",
            near_token.display()
        ),
        &[],
    )
    .await;
    let near_addr = near.client.health().await.expect("health").a2a_addr;
    let caller = crate::harness::capsule(
        near.root.path(),
        "caller",
        "caller",
        &format!(
            "lifecycle: {{task_acceptance: queue, after_task: sleep}}\n\
             capabilities:\n  network:\n    allow: [\"http://{far_addr}\"]\n"
        ),
    );
    near.client.start(&request(&caller)).await.expect("caller");
    let (state, answer, shown) = call(
        &near_addr,
        "r-1",
        &format!("http://{far_addr}/a2a/receiver 20 hello far"),
    )
    .await;
    assert_eq!(state, "TASK_STATE_COMPLETED", "{answer}\n{}", near.log());
    assert_eq!(answer, "completed: echo: hello far");
    // What it streamed, passed on (joined when it comes faster than roostd
    // stores it).
    assert!(shown.concat().contains("echo: hello far"), "{shown:?}");

    // The control: the same route without the token is refused.
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
        "params": {"message": message("x-1", "no token")}})
    .to_string();
    let (status, _, body) = crate::a2a::http(
        &far_addr,
        "POST",
        "/a2a/receiver",
        &[crate::a2a::V1, crate::a2a::JSON],
        &body,
    )
    .await;
    assert_eq!(status, 401, "refused without the token: {body}");
    assert!(
        !near.log().contains(route_token),
        "the token is never logged"
    );
}
