//! Capsules' messages to peers elsewhere (`murmur:message/send`), against the
//! official Python SDK's server: the seed's `host:port` names a peer, roostd
//! adds the token its config has for the peer (the control: the same send
//! without it is refused by the peer), and a peer whose card says 0.3 is
//! spoken to in 0.3.

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::a2a::{message, rpc};
use crate::a2a_script::sdk_python;
use crate::harness::{Daemon, TEST_CONFIG, conformance, repo, request};

const SERVE: &str = "{task_acceptance: queue, after_task: sleep}";
const TOKEN: &str = "peer-token-0123456789abcdef";

/// The SDK's server on a free loopback port, killed when dropped.
struct SdkPeer {
    _child: tokio::process::Child,
    port: u16,
}

impl SdkPeer {
    async fn start(args: &[&str]) -> Self {
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
