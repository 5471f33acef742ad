//! Push notifications, end to end: a receiver on loopback (allowed by
//! `a2a.push.allow`; refused without it, the control), configs made with a
//! `SendMessage` and through the config methods of both bindings, every
//! event delivered at least once, in order, with the config's credentials,
//! retried while the receiver fails, and across a `kill -9` of roostd.

use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use serde_json::{Value, json};

use crate::a2a::{V1, http, message, rpc};
use crate::harness::{Daemon, TEST_CONFIG, conformance, request};

/// What the receiver was sent: (headers, body) per request.
#[derive(Clone, Default)]
struct Receiver {
    seen: Arc<Mutex<Vec<(HeaderMap, Value)>>>,
    /// The status it answers with.
    status: Arc<AtomicU16>,
}

impl Receiver {
    async fn start(status: u16) -> (Self, String) {
        let r = Receiver {
            status: Arc::new(AtomicU16::new(status)),
            ..Self::default()
        };
        let app = axum::Router::new()
            .route(
                "/hook",
                axum::routing::post(
                    |State(r): State<Receiver>, headers: HeaderMap, body: Bytes| async move {
                        let v = serde_json::from_slice(&body).unwrap_or(Value::Null);
                        r.seen.lock().expect("lock").push((headers, v));
                        StatusCode::from_u16(r.status.load(Ordering::SeqCst))
                            .unwrap_or(StatusCode::OK)
                    },
                ),
            )
            .with_state(r.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move { axum::serve(listener, app).await });
        (r, format!("http://{addr}/hook"))
    }

    fn seen(&self) -> Vec<(HeaderMap, Value)> {
        self.seen.lock().expect("lock").clone()
    }

    /// Waits until a delivery (answered 2xx or not) says the task ended.
    async fn until_completed(&self, task_id: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let done = self.seen().iter().any(|(_, v)| {
                v["statusUpdate"]["taskId"] == task_id
                    && v["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
            }) && self.status.load(Ordering::SeqCst) == 200;
            if done {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "no completed event for {task_id}: {:?}",
                self.seen()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn header(h: &HeaderMap, name: &str) -> String {
    h.get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string()
}

/// The event ids delivered for a task, first delivery of each, in order.
fn event_seqs(seen: &[(HeaderMap, Value)], task_id: &str) -> Vec<u64> {
    let mut seqs: Vec<u64> = Vec::new();
    for (h, _) in seen {
        let id = header(h, "roost-event-id");
        if let Some(seq) = id
            .strip_prefix(&format!("{task_id}:"))
            .and_then(|s| s.parse().ok())
            && !seqs.contains(&seq)
        {
            seqs.push(seq);
        }
    }
    seqs
}

const SERVE: &str = "{task_acceptance: queue, after_task: sleep}";

/// roostd with `a2a` settings, serving the conformance capsule as `route`;
/// with the gateway's address.
async fn serving(a2a: &str, route: &str) -> (Daemon, String) {
    let daemon = Daemon::start_with(&format!("{TEST_CONFIG}a2a: {a2a}\n"), &[]).await;
    let addr = daemon.client.health().await.expect("health").a2a_addr;
    let dir = conformance(daemon.root.path(), route, SERVE, "");
    daemon.client.start(&request(&dir)).await.expect("start");
    (daemon, addr)
}

async fn push_capability(addr: &str, route: &str) -> Value {
    crate::a2a_card::card(addr, route).await["capabilities"]["pushNotifications"].clone()
}

fn push_config(url: &str) -> Value {
    json!({"url": url, "token": "tok-1", "authentication": {"scheme": "Bearer", "credentials": "cred-1"}})
}

/// Sends `text` as message `id` with a push config for `url`.
async fn send_with_push(addr: &str, route: &str, id: &str, url: &str) -> Value {
    rpc(
        addr,
        route,
        Some("1.0"),
        "SendMessage",
        json!({
            "message": message(id, "hello"),
            "configuration": {"taskPushNotificationConfig": push_config(url)},
        }),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_event_reaches_the_receiver_in_order_with_its_credentials() {
    // The receiver fails the first deliveries: they are tried again.
    let (receiver, url) = Receiver::start(503).await;
    let (daemon, addr) = serving("{push: {allow: [127.0.0.1]}}", "pusher").await;
    assert_eq!(push_capability(&addr, "pusher").await, true);

    // The SSRF guard: the same receiver by a name that is not listed is
    // refused; listed (127.0.0.1) it is taken.
    let unlisted = url.replace("127.0.0.1", "localhost");
    let r = send_with_push(&addr, "pusher", "p-refused", &unlisted).await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("a2a.push.allow"),
        "{r}"
    );
    let r = send_with_push(&addr, "pusher", "p-1", &url).await;
    let task = r["result"]["task"].clone();
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{r}");
    let task_id = task["id"].as_str().expect("id").to_string();
    // Two failed tries, then the receiver takes them.
    let deadline = Instant::now() + Duration::from_secs(30);
    while receiver.seen().len() < 2 {
        assert!(Instant::now() < deadline, "no delivery tried");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    receiver.status.store(200, Ordering::SeqCst);
    receiver.until_completed(&task_id).await;

    let seen = receiver.seen();
    for (h, v) in &seen {
        assert_eq!(header(h, "x-a2a-notification-token"), "tok-1");
        assert_eq!(header(h, "authorization"), "Bearer cred-1");
        assert!(header(h, "content-type").starts_with("application/json"));
        let body = v
            .as_object()
            .and_then(|o| o.values().next())
            .expect("a StreamResponse");
        assert_eq!(body["taskId"], task_id.as_str(), "{v}");
    }
    // Every event of the log, from `submitted` on, in order (the first one
    // more than once: it was retried).
    let (_, _, log) = http(
        &addr,
        "GET",
        &format!("/a2a/pusher/tasks/{task_id}?historyLength=0"),
        &[V1],
        "",
    )
    .await;
    let seqs = event_seqs(&seen, &task_id);
    assert_eq!(seqs.first(), Some(&1), "{seqs:?}");
    assert!(
        seqs.windows(2).all(|w| w[1] == w[0] + 1),
        "in order, none missing: {seqs:?}\n{log}"
    );
    assert!(seen.len() > seqs.len(), "the failed tries were repeated");

    // The config methods: JSON-RPC 1.0, 0.3 and HTTP+JSON.
    let made = rpc(
        &addr,
        "pusher",
        Some("1.0"),
        "CreateTaskPushNotificationConfig",
        json!({"taskId": task_id, "id": "second", "url": url}),
    )
    .await;
    assert_eq!(made["result"]["id"], "second", "{made}");
    let got = rpc(
        &addr,
        "pusher",
        Some("1.0"),
        "GetTaskPushNotificationConfig",
        json!({"taskId": task_id, "id": task_id}),
    )
    .await;
    assert_eq!(got["result"]["authentication"]["scheme"], "Bearer", "{got}");
    let listed = rpc(
        &addr,
        "pusher",
        None,
        "tasks/pushNotificationConfig/list",
        json!({"id": task_id}),
    )
    .await;
    let ids: Vec<&str> = listed["result"]
        .as_array()
        .expect("0.3 list")
        .iter()
        .filter_map(|c| c["pushNotificationConfig"]["id"].as_str())
        .collect();
    assert_eq!(ids, ["second", task_id.as_str()], "{listed}");
    let path = format!("/a2a/pusher/tasks/{task_id}/pushNotificationConfigs/second");
    let (status, _, _) = http(&addr, "DELETE", &path, &[V1], "").await;
    assert_eq!(status, 200);
    let (_, _, rest) = http(
        &addr,
        "GET",
        &format!("/a2a/pusher/tasks/{task_id}/pushNotificationConfigs"),
        &[V1],
        "",
    )
    .await;
    let rest: Value = serde_json::from_str(&rest).expect("json");
    assert_eq!(rest["configs"].as_array().map(Vec::len), Some(1), "{rest}");
    // Refused: another scheme, a task that is not there, a config that is not.
    let bad = rpc(
        &addr,
        "pusher",
        Some("1.0"),
        "CreateTaskPushNotificationConfig",
        json!({"taskId": task_id, "url": "file:///etc/passwd"}),
    )
    .await;
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
    let missing = rpc(
        &addr,
        "pusher",
        Some("1.0"),
        "CreateTaskPushNotificationConfig",
        json!({"taskId": "tsk_nope", "url": url}),
    )
    .await;
    assert_eq!(missing["error"]["code"], -32001, "{missing}");
    let gone = rpc(
        &addr,
        "pusher",
        Some("1.0"),
        "GetTaskPushNotificationConfig",
        json!({"taskId": task_id, "id": "second"}),
    )
    .await;
    assert_eq!(gone["error"]["code"], -32001, "{gone}");
    assert!(
        !daemon.log().contains("cred-1"),
        "credentials stay out of the log"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_deliveries_survive_kill_9_and_push_can_be_turned_off() {
    let (receiver, url) = Receiver::start(503).await;
    let (mut daemon, addr) = serving("{push: {allow: [127.0.0.1]}}", "durable-push").await;
    let r = send_with_push(&addr, "durable-push", "dp-1", &url).await;
    let task_id = r["result"]["task"]["id"]
        .as_str()
        .expect("task")
        .to_string();
    let deadline = Instant::now() + Duration::from_secs(30);
    while receiver.seen().is_empty() {
        assert!(Instant::now() < deadline, "no delivery tried");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Nothing was taken yet; roostd dies; the receiver comes back.
    daemon.kill9();
    receiver.status.store(200, Ordering::SeqCst);
    daemon.spawn().await;
    receiver.until_completed(&task_id).await;
    let seqs = event_seqs(&receiver.seen(), &task_id);
    assert_eq!(seqs.first(), Some(&1), "{seqs:?}");
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");
    drop(daemon);

    // Off: the card says so and the methods answer PushNotificationNotSupported.
    let (_off, addr) = serving("{push: {enabled: false}}", "quiet").await;
    assert_eq!(push_capability(&addr, "quiet").await, false);
    let answer = send_with_push(&addr, "quiet", "q-1", &url).await;
    assert_eq!(answer["error"]["code"], -32003, "{answer}");
}
