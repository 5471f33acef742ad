//! No client can exhaust roostd: a listener holds at most
//! `http.max_connections` connections and closes the rest at once (and says
//! so in its log), a connection that does not finish its request head
//! within `http.header_read_timeout_secs` (or sends nothing) is closed, and
//! a task takes at most `a2a.push.max_configs_per_task` push configs. Each
//! with its control: a well-behaved request is served throughout.

use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::a2a::{JSON, V1, http, message, rpc};
use crate::harness::{Daemon, TEST_CONFIG, conformance, request};

/// Whether roostd closes `stream` within `within` (EOF or a reset), having
/// sent nothing but perhaps an error status.
async fn closed_within(stream: &mut tokio::net::TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 256];
    let deadline = Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            // An answer to a request the client never finished (408):
            // read on to the close.
            Ok(Ok(_)) => continue,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_and_idle_clients_cannot_hold_roostds_connections() {
    let config =
        format!("{TEST_CONFIG}http: {{max_connections: 8, header_read_timeout_secs: 2}}\n");
    let daemon = Daemon::start_with(&config, &[]).await;
    let addr = daemon.client.health().await.expect("health").a2a_addr;

    // Eight clients that start a request head and never finish it.
    let mut slow = Vec::new();
    for _ in 0..8 {
        let mut s = tokio::net::TcpStream::connect(&addr)
            .await
            .expect("connect");
        s.write_all(b"POST /a2a/x HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            .await
            .expect("half a head");
        slow.push(s);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    // The ninth is closed at once, and the log says why.
    let mut ninth = tokio::net::TcpStream::connect(&addr)
        .await
        .expect("connect");
    assert!(
        closed_within(&mut ninth, Duration::from_secs(1)).await,
        "past the limit a connection is closed at once"
    );
    assert!(
        daemon.log().contains("connection limit reached"),
        "{}",
        daemon.log()
    );
    // The slow ones are closed once their head is overdue.
    let started = Instant::now();
    for s in &mut slow {
        assert!(
            closed_within(s, Duration::from_secs(6)).await,
            "a head not finished in time is closed"
        );
    }
    assert!(started.elapsed() < Duration::from_secs(6));
    // A connection that sends nothing at all is closed too.
    let mut silent = tokio::net::TcpStream::connect(&addr)
        .await
        .expect("connect");
    assert!(closed_within(&mut silent, Duration::from_secs(6)).await);
    // The control: with the slots free again, a request is served.
    let (status, _, body) = http(&addr, "GET", "/healthz", &[], "").await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_takes_a_bounded_number_of_push_configs() {
    let config =
        format!("{TEST_CONFIG}a2a: {{push: {{allow: [127.0.0.1], max_configs_per_task: 3}}}}\n");
    let daemon = Daemon::start_with(&config, &[]).await;
    let addr = daemon.client.health().await.expect("health").a2a_addr;
    let dir = conformance(
        daemon.root.path(),
        "pushy",
        "{task_acceptance: queue, after_task: sleep}",
        "",
    );
    daemon.client.start(&request(&dir)).await.expect("start");
    let sent = rpc(
        &addr,
        "pushy",
        Some("1.0"),
        "SendMessage",
        json!({"message": message("p-1", "hello")}),
    )
    .await;
    let task_id = sent["result"]["task"]["id"]
        .as_str()
        .expect("task")
        .to_string();
    // Nothing listens there: deliveries fail and are retried, which is fine.
    let url = "http://127.0.0.1:9/hook";
    let create = |id: &str| {
        json!({"jsonrpc": "2.0", "id": 1, "method": "CreateTaskPushNotificationConfig",
               "params": {"taskId": task_id, "id": id, "url": url}})
        .to_string()
    };
    let post = |body: String| {
        let addr = addr.clone();
        async move {
            let (status, _, body) = http(&addr, "POST", "/a2a/pushy", &[V1, JSON], &body).await;
            assert_eq!(status, 200, "{body}");
            serde_json::from_str::<serde_json::Value>(&body).expect("json")
        }
    };
    for id in ["c1", "c2", "c3"] {
        let made = post(create(id)).await;
        assert_eq!(made["result"]["id"], id, "{made}");
    }
    let refused = post(create("c4")).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("max_configs_per_task")),
        "{refused}"
    );
    // The controls: replacing one is no new one, and a freed slot is used.
    let replaced = post(create("c1")).await;
    assert_eq!(replaced["result"]["id"], "c1", "{replaced}");
    let deleted = post(
        json!({"jsonrpc": "2.0", "id": 1, "method": "DeleteTaskPushNotificationConfig",
               "params": {"taskId": task_id, "id": "c2"}})
        .to_string(),
    )
    .await;
    assert!(deleted.get("error").is_none(), "{deleted}");
    let made = post(create("c4")).await;
    assert_eq!(made["result"]["id"], "c4", "{made}");
    let listed = post(
        json!({"jsonrpc": "2.0", "id": 1, "method": "ListTaskPushNotificationConfigs",
               "params": {"taskId": task_id}})
        .to_string(),
    )
    .await;
    assert_eq!(
        listed["result"]["configs"].as_array().map(Vec::len),
        Some(3),
        "{listed}"
    );
}

/// A receiver that accepts push deliveries and never answers (a tarpit) on
/// 127.0.0.2: how many of its connections are open at most, and whether
/// roostd has given up on any yet.
#[derive(Default)]
struct Tarpit {
    open: std::sync::atomic::AtomicUsize,
    most: std::sync::atomic::AtomicUsize,
    closed: std::sync::atomic::AtomicBool,
}

async fn tarpit() -> (std::sync::Arc<Tarpit>, String) {
    use std::sync::atomic::Ordering::SeqCst;
    let listener = tokio::net::TcpListener::bind("127.0.0.2:0")
        .await
        .expect("127.0.0.2 (loopback)");
    let addr = listener.local_addr().expect("addr");
    let pit = std::sync::Arc::new(Tarpit::default());
    let seen = std::sync::Arc::clone(&pit);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let pit = std::sync::Arc::clone(&seen);
            let now = pit.open.fetch_add(1, SeqCst) + 1;
            pit.most.fetch_max(now, SeqCst);
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                while let Ok(n) = stream.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                }
                pit.open.fetch_sub(1, SeqCst);
                pit.closed.store(true, SeqCst);
            });
        }
    });
    (pit, format!("http://{addr}/hook"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_that_never_answers_holds_its_own_slots_not_everyones() {
    use std::sync::atomic::Ordering::SeqCst;
    let config = format!(
        "{TEST_CONFIG}a2a: {{push: {{allow: [127.0.0.1, 127.0.0.2], max_in_flight_per_host: 2}}}}\n"
    );
    let daemon = Daemon::start_with(&config, &[]).await;
    let addr = daemon.client.health().await.expect("health").a2a_addr;
    let dir = conformance(
        daemon.root.path(),
        "pushes",
        "{task_acceptance: queue, after_task: sleep}",
        "",
    );
    daemon.client.start(&request(&dir)).await.expect("start");
    let (pit, slow_url) = tarpit().await;
    // A fast receiver on 127.0.0.1: it counts completed-task deliveries.
    let fast = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = std::sync::Arc::clone(&fast);
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |body: axum::body::Bytes| {
            let counted = std::sync::Arc::clone(&counted);
            async move {
                if String::from_utf8_lossy(&body).contains("TASK_STATE_COMPLETED") {
                    counted.fetch_add(1, SeqCst);
                }
                axum::http::StatusCode::OK
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let fast_url = format!("http://{}/hook", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await });

    let send = |id: String, url: String| {
        let addr = addr.clone();
        async move {
            let params = json!({"message": message(&id, "hello"),
                                "configuration": {"taskPushNotificationConfig": {"url": url}}});
            rpc(&addr, "pushes", Some("1.0"), "SendMessage", params).await
        }
    };
    // Four tasks whose receiver never answers, then one whose receiver does.
    for i in 0..4 {
        let v = send(format!("slow-{i}"), slow_url.clone()).await;
        assert!(v.get("result").is_some(), "{v}");
    }
    let v = send("fast-0".into(), fast_url).await;
    assert!(v.get("result").is_some(), "{v}");
    // The fast receiver hears its task end while every delivery to the
    // tarpit still hangs (none given up yet).
    let deadline = Instant::now() + Duration::from_secs(60);
    while fast.load(SeqCst) == 0 {
        assert!(Instant::now() < deadline, "the fast receiver heard nothing");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        !pit.closed.load(SeqCst),
        "the fast delivery waited for a slow one to give up"
    );
    // The tarpit host holds at most its limit of deliveries; the control:
    // it was sent some (the four configs wanted four at once).
    let most = pit.most.load(SeqCst);
    assert!(
        (1..=2).contains(&most),
        "{most} deliveries at once to one host"
    );
}

/// Opens `SubscribeToTask` on `route`'s `task` over HTTP+JSON and keeps the
/// connection: what it read once the first event or a refusal came.
async fn subscribe(addr: &str, route: &str, task: &str) -> (tokio::net::TcpStream, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let req = format!(
        "POST /a2a/{route}/tasks/{task}:subscribe HTTP/1.1\r\nHost: {addr}\r\n\
         A2A-Version: 1.0\r\nContent-Length: 0\r\n\r\n"
    );
    stream.write_all(req.as_bytes()).await.expect("write");
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = String::from_utf8_lossy(&got);
        if text.contains("data:") || text.contains("max_streams_per_route") {
            break;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => got.extend_from_slice(&buf[..n]),
            _ => break,
        }
    }
    let text = String::from_utf8_lossy(&got).into_owned();
    (stream, text)
}

/// Starts an A2A capsule named `name` and leaves one of its tasks waiting
/// for input (open, so a stream on it stays open): the task id.
async fn waiting_task(daemon: &Daemon, addr: &str, name: &str) -> String {
    let dir = conformance(
        daemon.root.path(),
        name,
        "{task_acceptance: queue, after_task: sleep}",
        "",
    );
    daemon.client.start(&request(&dir)).await.expect("start");
    let sent = rpc(
        addr,
        name,
        Some("1.0"),
        "SendMessage",
        json!({"message": message(&format!("{name}-1"), "ask")}),
    )
    .await;
    let task = &sent["result"]["task"];
    assert_eq!(
        task["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{sent}"
    );
    task["id"].as_str().expect("task id").to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_holds_at_most_its_limit_of_streams() {
    let config = format!("{TEST_CONFIG}http: {{max_streams_per_route: 2}}\n");
    let daemon = Daemon::start_with(&config, &[]).await;
    let addr = daemon.client.health().await.expect("health").a2a_addr;
    let held = waiting_task(&daemon, &addr, "held").await;
    let other = waiting_task(&daemon, &addr, "other").await;
    let open = |route: &'static str, task: String| {
        let addr = addr.clone();
        async move { subscribe(&addr, route, &task).await }
    };
    let (first, said) = open("held", held.clone()).await;
    assert!(said.starts_with("HTTP/1.1 200"), "{said}");
    let (_second, said) = open("held", held.clone()).await;
    assert!(said.starts_with("HTTP/1.1 200"), "{said}");
    // The attack: a third stream on the route.
    let (_third, said) = open("held", held.clone()).await;
    assert!(!said.starts_with("HTTP/1.1 200"), "{said}");
    assert!(said.contains("max_streams_per_route"), "{said}");
    // Controls: another route is not held up, and a closed stream's slot is
    // taken by the next one.
    let (_elsewhere, said) = open("other", other).await;
    assert!(said.starts_with("HTTP/1.1 200"), "{said}");
    drop(first);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_again, said) = open("held", held.clone()).await;
        if said.starts_with("HTTP/1.1 200") {
            break;
        }
        // roostd sees the close when it next writes to the stream.
        assert!(
            Instant::now() < deadline,
            "the slot never came back: {said}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
