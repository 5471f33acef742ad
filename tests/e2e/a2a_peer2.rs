//! `murmur:peer/call@0.2.0`, end to end: a capsule (`tests/guests/relay`)
//! calls a peer by its agent card over each binding and version the card
//! lists — JSON-RPC, HTTP+JSON and gRPC, A2A 1.0 and 0.3 — with every part
//! in and out, streaming or not, and then subscribes again, cancels and
//! reads the peer's task; the peers are roostd's own capsules and the
//! official A2A SDK's server. The network policy holds for the interface a
//! card names, not only for the card.

use serde_json::{Value, json};

use crate::a2a::rpc;
use crate::a2a_peers::SdkPeer;
use crate::harness::{Daemon, TEST_CONFIG, capsule, conformance, request};

const SERVE: &str = "{task_acceptance: queue, after_task: sleep, queue_depth: 64, concurrency: 16}";

/// roostd serving the conformance capsule (the default route, so 0.3's
/// gRPC reaches it), the `parts` capsule, and the relay, which may reach
/// roostd's gateway and `extra_allow`.
async fn relay_daemon(extra_allow: &str) -> (Daemon, String) {
    relay_daemon_with("", extra_allow).await
}

/// [`relay_daemon`] with more `a2a:` settings.
async fn relay_daemon_with(a2a: &str, extra_allow: &str) -> (Daemon, String) {
    let config = format!(
        "{TEST_CONFIG}a2a: {{card_compat: merged, grpc: {{default_route: conformance}}{a2a}}}\n"
    );
    let daemon = Daemon::start_with(&config, &[]).await;
    let addr = daemon.client.health().await.expect("health").a2a_addr;
    let lifecycle = format!("lifecycle: {SERVE}\n");
    for dir in [
        conformance(daemon.root.path(), "conformance", SERVE, ""),
        capsule(daemon.root.path(), "parts", "parts", &lifecycle),
        capsule(
            daemon.root.path(),
            "relay",
            "relay",
            &format!(
                "{lifecycle}capabilities:\n  network:\n    allow: [\"http://{addr}\"{extra_allow}]\n"
            ),
        ),
    ] {
        daemon
            .client
            .start(&request(&dir))
            .await
            .unwrap_or_else(|e| panic!("start: {e}\n{}", daemon.log()));
    }
    (daemon, addr)
}

/// The relay's answer to `lines` (and `extra` parts): its task.
async fn relay(addr: &str, lines: &str, extra: &[Value]) -> Value {
    relay_at(addr, "relay", lines, extra).await
}

pub(crate) async fn relay_at(addr: &str, route: &str, lines: &str, extra: &[Value]) -> Value {
    let mut parts = vec![json!({"text": lines})];
    parts.extend(extra.iter().cloned());
    let id = uuid::Uuid::now_v7().to_string();
    let message = json!({"messageId": id, "role": "ROLE_USER", "parts": parts});
    let r = rpc(
        addr,
        route,
        Some("1.0"),
        "SendMessage",
        json!({"message": message}),
    )
    .await;
    r["result"]["task"].clone()
}

pub(crate) fn said(task: &Value) -> String {
    task["status"]["message"]["parts"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn artifact<'a>(task: &'a Value, id: &str) -> Option<&'a Value> {
    task["artifacts"]
        .as_array()?
        .iter()
        .find(|a| a["artifactId"] == id)
}

fn artifact_text(task: &Value, id: &str) -> String {
    artifact(task, id)
        .and_then(|a| a["parts"].as_array())
        .map(|p| p.iter().filter_map(|p| p["text"].as_str()).collect())
        .unwrap_or_default()
}

const COMBOS: [(&str, &str); 6] = [
    ("jsonrpc", "1.0"),
    ("jsonrpc", "0.3"),
    ("http-json", "1.0"),
    ("http-json", "0.3"),
    ("grpc", "1.0"),
    ("grpc", "0.3"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capsule_calls_a_peer_by_its_card_on_every_binding_and_version() {
    let (daemon, addr) = relay_daemon("").await;
    let card = format!("http://{addr}/a2a/conformance");
    for (binding, version) in COMBOS {
        for streaming in [false, true] {
            let task = relay(
                &addr,
                &format!(
                    "url={card}\nbinding={binding}\nversion={version}\nstreaming={streaming}\n\
                     text=hello"
                ),
                &[],
            )
            .await;
            let what = format!("{binding} {version} streaming={streaming}: {task}");
            assert_eq!(
                task["status"]["state"],
                "TASK_STATE_COMPLETED",
                "{what}\n{}",
                daemon.log()
            );
            assert!(said(&task).starts_with("completed tsk_"), "{what}");
            assert_eq!(artifact_text(&task, "answer"), "echo: hello", "{what}");
        }
        // The task's later life: subscribed to again after its first
        // event, canceled, read.
        let lines = format!("url={card}\nbinding={binding}\nversion={version}\nstreaming=true");
        let again = relay(&addr, &format!("{lines}\nop=resubscribe\ntext=slow"), &[]).await;
        assert!(
            said(&again).starts_with("completed "),
            "{binding} {version}: {again}"
        );
        assert_eq!(artifact_text(&again, "answer"), "echo: slow", "{again}");
        let canceled = relay(&addr, &format!("{lines}\nop=cancel\ntext=sleep"), &[]).await;
        assert!(
            said(&canceled).starts_with("canceled "),
            "{binding} {version}: {canceled}"
        );
        let read = relay(&addr, &format!("{lines}\nop=get\ntext=hello"), &[]).await;
        assert!(
            said(&read).starts_with("completed "),
            "{binding} {version}: {read}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_part_goes_to_the_peer_and_comes_back_on_each_binding() {
    let (daemon, addr) = relay_daemon("").await;
    let file = json!({"raw": "AAEC/w==", "mediaType": "application/x-protobuf",
                      "filename": "instruction.bin"});
    // gRPC carries JSON numbers as doubles: 1.5 reads back as it went.
    let data = json!({"data": {"step": 1.5, "nested": [true, null]}});
    // 0.3's gRPC serves the default route only (the conformance capsule).
    for (binding, version) in &COMBOS[..5] {
        let task = relay(
            &addr,
            &format!(
                "url=http://{addr}/a2a/parts\nbinding={binding}\nversion={version}\ntext=both"
            ),
            &[file.clone(), data.clone()],
        )
        .await;
        let what = format!("{binding} {version}: {task}\n{}", daemon.log());
        let echoed = artifact(&task, "echo").expect(&what);
        assert_eq!(echoed["parts"], json!([file, data]), "{what}");
        // The peer's status message: `got 3 parts`, then the echoed parts.
        let message = &task["status"]["message"]["parts"];
        assert_eq!(message[1]["text"], "got 3 parts", "{what}");
        assert_eq!(message[2], file, "{what}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capsule_calls_the_official_sdks_server_on_its_three_bindings() {
    let grpc_port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let sdk = SdkPeer::start(&["--grpc-port", &grpc_port.to_string()]).await;
    let allow = format!(
        ", \"http://127.0.0.1:{}\", \"http://127.0.0.1:{grpc_port}\"",
        sdk.port
    );
    let (daemon, addr) = relay_daemon(&allow).await;
    for (binding, url) in [
        ("jsonrpc", format!("http://127.0.0.1:{}", sdk.port)),
        ("http-json", format!("http://127.0.0.1:{}", sdk.port)),
        ("grpc", format!("127.0.0.1:{grpc_port}")),
    ] {
        // By endpoint: the SDK's card names its own interfaces.
        let lines = format!("url={url}\nendpoint=true\nbinding={binding}\nstreaming=true");
        let task = relay(&addr, &format!("{lines}\ntext=slow"), &[]).await;
        let what = format!("{binding}: {task}\n{}", daemon.log());
        assert!(said(&task).starts_with("completed "), "{what}");
        assert_eq!(artifact_text(&task, "answer"), "echo: slow", "{what}");
        let asked = relay(&addr, &format!("{lines}\ntext=ask"), &[]).await;
        assert!(
            said(&asked).starts_with("input-required "),
            "{binding}: {asked}"
        );
        assert_eq!(asked["status"]["message"]["parts"][1]["text"], "what next?");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interface_a_card_names_elsewhere_is_held_to_the_network_policy() {
    // roostd's cards name the SDK server's address (`a2a.public_url`): the
    // card is read from an allowed address, the interface it names is not.
    let sdk = SdkPeer::start(&["--path", "/a2a/conformance"]).await;
    let public = format!(", public_url: \"http://127.0.0.1:{}\"", sdk.port);
    let (daemon, addr) = relay_daemon_with(&public, "").await;
    let card = format!("url=http://{addr}/a2a/conformance\nbinding=jsonrpc\ntext=hello");
    let task = relay(&addr, &card, &[]).await;
    assert_eq!(task["status"]["state"], "TASK_STATE_FAILED", "{task}");
    assert!(
        said(&task).contains("network policy") && said(&task).contains(&sdk.port.to_string()),
        "the card's interface is refused by the policy: {task}"
    );
    // The control: a relay that may reach the SDK's address follows the
    // same card there, and the SDK's server answers.
    let open = capsule(
        daemon.root.path(),
        "relay-open",
        "relay",
        &format!(
            "lifecycle: {SERVE}\ncapabilities:\n  network:\n    allow: [\"http://{addr}\", \
             \"http://127.0.0.1:{}\"]\n",
            sdk.port
        ),
    );
    daemon
        .client
        .start(&request(&open))
        .await
        .expect("relay-open");
    let ok = relay_at(&addr, "relay-open", &card, &[]).await;
    assert!(
        said(&ok).starts_with("completed "),
        "{ok}\n{}",
        daemon.log()
    );
    assert_eq!(artifact_text(&ok, "answer"), "echo: hello", "{ok}");
}
