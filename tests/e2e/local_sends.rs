//! A message a capsule sends to a route of its own roostd
//! (`murmur:message/send`, `murmur:peer/call@0.1.0`), taken in-process, is
//! an A2A request like any other: it needs the route's token, which roostd
//! presents only as `a2a.peers` says for that URL, and its owner is the
//! sending session, so it neither joins another client's context nor gets
//! another caller's task back for a message id that caller used. Each
//! refusal has its control: the same send with the route's token, in its
//! own context, with its own message id.

use serde_json::{Value, json};

use crate::a2a::{JSON, V1, http, message};
use crate::harness::{Daemon, TEST_CONFIG, capsule, conformance, free_port, request};
use crate::route_tokens::token_file;

const BILLING: &str = "billing-token-0123456789abcdef";
const PAYROLL: &str = "payroll-token-0123456789abcdef";
const ALICE: &str = "alice-token-0123456789abcdef";

/// The caller capsule's answer to `text`: its final state and its answer
/// (or the status message that says why it failed).
async fn relay(addr: &str, id: &str, text: &str) -> (String, String) {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                      "params": {"message": message(id, text)}});
    let (status, _, reply) = http(addr, "POST", "/a2a/relay", &[V1, JSON], &body.to_string()).await;
    assert_eq!(status, 200, "{reply}");
    let task = &serde_json::from_str::<Value>(&reply).expect("json")["result"]["task"];
    let said = task["artifacts"][0]["parts"][0]["text"]
        .as_str()
        .or_else(|| task["status"]["message"]["parts"][0]["text"].as_str())
        .unwrap_or_default()
        .to_string();
    (
        task["status"]["state"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        said,
    )
}

/// A client's `SendMessage` to `route` with a token over HTTP: the task.
async fn client(addr: &str, route: &str, token: &str, id: &str, context: Option<&str>) -> Value {
    let mut m = message(id, "from a client");
    if let Some(c) = context {
        m["contextId"] = json!(c);
    }
    let body =
        json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": m}});
    let auth = format!("Bearer {token}");
    let (status, _, reply) = http(
        addr,
        "POST",
        &format!("/a2a/{route}"),
        &[V1, JSON, ("Authorization", &auth)],
        &body.to_string(),
    )
    .await;
    assert_eq!(status, 200, "{reply}");
    serde_json::from_str::<Value>(&reply).expect("json")["result"]["task"].clone()
}

/// `sent <task> <context> <state>` split.
fn sent(said: &str) -> (String, String) {
    let words: Vec<&str> = said.split_whitespace().collect();
    assert_eq!(words.first(), Some(&"sent"), "{said}");
    (words[1].to_string(), words[2].to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capsules_send_to_its_own_roostd_takes_the_routes_token_and_owns_its_tasks() {
    let secrets = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let gateway = format!("http://127.0.0.1:{port}");
    let (billing, payroll, alice) = (
        token_file(secrets.path(), "billing", BILLING),
        token_file(secrets.path(), "payroll", PAYROLL),
        token_file(secrets.path(), "alice", ALICE),
    );
    let config = TEST_CONFIG.replace(
        "a2a_listen: 127.0.0.1:0\n",
        &format!(
            "a2a_listen: 127.0.0.1:{port}\na2a: {{routes: {{billing: {{token_file: \"{billing}\"}}, \
             payroll: {{token_file: \"{payroll}\"}}, shared: {{clients: {{alice: {{token_file: \
             \"{alice}\"}}}}}}}}, peers: [{{url: \"{gateway}/a2a/billing\", token_file: \
             \"{billing}\"}}, {{url: \"{gateway}/a2a/shared\", token_file: \"{alice}\"}}]}}\n"
        ),
    );
    let daemon = Daemon::start_with(&config, &[]).await;
    let addr = format!("127.0.0.1:{port}");
    let serve = "{task_acceptance: queue, after_task: sleep, concurrency: 4}";
    for name in ["billing", "payroll", "shared"] {
        let dir = conformance(daemon.root.path(), name, serve, "");
        daemon.client.start(&request(&dir)).await.expect("start");
    }
    let dir = capsule(
        daemon.root.path(),
        "relay",
        "caller",
        &format!("lifecycle: {serve}\ncapabilities: {{network: {{allow: [\"{gateway}\"]}}}}\n"),
    );
    daemon
        .client
        .start(&request(&dir))
        .await
        .expect("start relay");

    // A route's token: payroll's is nowhere in a2a.peers, so neither a
    // send nor a call reaches it; billing's is, so both do; and payroll
    // itself answers a client that has its token.
    let (state, said) = relay(&addr, "r1", &format!("send {gateway}/a2a/payroll p1 - hi")).await;
    assert_eq!(state, "TASK_STATE_FAILED", "{said}");
    assert!(said.contains("401") && said.contains("a2a.peers"), "{said}");
    let (state, said) = relay(&addr, "r2", &format!("call {gateway}/a2a/payroll 20 hi")).await;
    assert_eq!(state, "TASK_STATE_FAILED", "{said}");
    assert!(said.contains("401"), "{said}");
    let (state, said) = relay(&addr, "r3", &format!("send {gateway}/a2a/billing b1 - hi")).await;
    assert_eq!(state, "TASK_STATE_COMPLETED", "{said}");
    let (state, said) = relay(&addr, "r4", &format!("call {gateway}/a2a/billing 20 hi")).await;
    assert_eq!(
        (state.as_str(), said.as_str()),
        ("TASK_STATE_COMPLETED", "completed: echo: hi")
    );
    let direct = client(&addr, "payroll", PAYROLL, "c1", None).await;
    assert_eq!(
        direct["status"]["state"], "TASK_STATE_COMPLETED",
        "{direct}"
    );

    // Another caller's message id: billing's one-token client sent "b-mine";
    // the relay sending "b-mine" gets a task of its own, not the client's.
    // Its own id again is its own first task (the control).
    let theirs = client(&addr, "billing", BILLING, "b-mine", None).await;
    let (state, said) = relay(
        &addr,
        "r5",
        &format!("send {gateway}/a2a/billing b-mine - x"),
    )
    .await;
    assert_eq!(state, "TASK_STATE_COMPLETED", "{said}");
    let (mine, _) = sent(&said);
    assert_ne!(
        Some(mine.as_str()),
        theirs["id"].as_str(),
        "not the client's task"
    );
    let (_, again) = relay(
        &addr,
        "r6",
        &format!("send {gateway}/a2a/billing b-mine - x"),
    )
    .await;
    assert_eq!(sent(&again).0, mine, "its own retry gets its own task");

    // Another client's context: the relay holds alice's token for
    // `shared`, which lets it reach the route, but it is not alice.
    let alices = client(&addr, "shared", ALICE, "a1", None).await;
    let context = alices["contextId"].as_str().expect("context");
    let (state, said) = relay(
        &addr,
        "r7",
        &format!("send {gateway}/a2a/shared s1 {context} hijack"),
    )
    .await;
    assert_eq!(state, "TASK_STATE_FAILED", "{said}");
    assert!(said.contains("another client's"), "{said}");
    let (state, said) = relay(
        &addr,
        "r8",
        &format!("callas {gateway}/a2a/shared 20 s2 {context} hijack"),
    )
    .await;
    assert_eq!(state, "TASK_STATE_FAILED", "{said}");
    // The control: a context of its own, continued.
    let (_, said) = relay(
        &addr,
        "r9",
        &format!("send {gateway}/a2a/shared s3 - first"),
    )
    .await;
    let (_, own) = sent(&said);
    let (state, said) = relay(
        &addr,
        "r10",
        &format!("send {gateway}/a2a/shared s4 {own} second"),
    )
    .await;
    assert_eq!(state, "TASK_STATE_COMPLETED", "{said}");
    assert_eq!(sent(&said).1, own);
    // And alice continues her own context as ever.
    let continued = client(&addr, "shared", ALICE, "a2", Some(context)).await;
    assert_eq!(continued["status"]["state"], "TASK_STATE_COMPLETED");
}
