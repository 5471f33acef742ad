//! Load for the A2A benchmarks (`a2a.rs`, `telemetry.rs`): keep-alive
//! clients sending blocking JSON-RPC `SendMessage` requests, and the
//! throughput and percentiles of what they measured.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;

pub struct Figures {
    pub requests: usize,
    pub errors: usize,
    pub per_sec: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

/// A message number not used before in this process: a message id the
/// route has a task for would be answered from that task (roostd
/// de-duplicates `messageId`s) without running anything.
pub fn next_message() -> usize {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

pub fn body(i: usize) -> bytes::Bytes {
    bytes::Bytes::from(
        serde_json::json!({"jsonrpc": "2.0", "id": i, "method": "SendMessage", "params": {
            "message": {"messageId": format!("bench-{i}"), "role": "ROLE_USER",
                        "parts": [{"text": "hello"}]}}})
        .to_string(),
    )
}

/// One client: a keep-alive connection sending blocking SendMessage requests
/// until `stop`; returns each request's latency (`None`: it failed).
pub async fn client(
    addr: String,
    path: String,
    _id: usize,
    stop: Arc<AtomicBool>,
    answer: Answer,
) -> Vec<Option<Duration>> {
    timed_client(addr, path, stop, answer, Instant::now())
        .await
        .into_iter()
        .map(|r| r.map(|(_, took)| took))
        .collect()
}

/// [`client`], keeping when each request started (since `origin`) beside
/// its latency.
async fn timed_client(
    addr: String,
    path: String,
    stop: Arc<AtomicBool>,
    answer: Answer,
    origin: Instant,
) -> Vec<Option<(Duration, Duration)>> {
    let mut out = Vec::new();
    let stream = tokio::net::TcpStream::connect(&addr)
        .await
        .expect("connect");
    stream.set_nodelay(true).expect("nodelay");
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    while !stop.load(Ordering::Relaxed) {
        let i = next_message();
        let req = http::Request::post(&path)
            .header("host", &addr)
            .header("content-type", "application/json")
            .header("a2a-version", "1.0")
            .body(Full::new(body(i)))
            .expect("request");
        let started = Instant::now();
        if sender.ready().await.is_err() {
            break;
        }
        let ok = match sender.send_request(req).await {
            Ok(resp) => {
                let status = resp.status();
                let bytes = resp.into_body().collect().await.map(|b| b.to_bytes());
                status.is_success() && bytes.is_ok_and(|b| answer.is(&String::from_utf8_lossy(&b)))
            }
            Err(_) => false,
        };
        out.push(ok.then(|| (started - origin, started.elapsed())));
    }
    out
}

/// Runs `clients` clients (each made by `client(id, stop)`) for `secs`,
/// then tells them to stop and adds up what each measured.
pub async fn run_clients<F, C>(clients: usize, secs: u64, client: F) -> Figures
where
    F: Fn(usize, Arc<AtomicBool>) -> C,
    C: Future<Output = Vec<Option<Duration>>> + Send + 'static,
{
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|id| tokio::spawn(client(id, Arc::clone(&stop))))
        .collect();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    stop.store(true, Ordering::Relaxed);
    let mut results = Vec::new();
    for t in tasks {
        results.extend(t.await.expect("client"));
    }
    figures(results, started.elapsed().as_secs_f64())
}

/// Where a level's slowest requests fall in time: `clients` clients for
/// `secs`, each request's start and latency kept; of the slowest 1 %, how
/// many started in each tenth of a second (their start modulo 1 s, from
/// the level's start) and in how many distinct 100 ms windows. A cause
/// that recurs every second (roostd's checkpoints) puts them in one or two
/// tenths; stalls that hit every request in flight at once put them in
/// few windows; the machine's own noise spreads them.
pub async fn tail(addr: &str, path: &str, clients: usize, secs: u64, answer: Answer) -> String {
    let origin = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let (addr, path) = (addr.to_string(), path.to_string());
            tokio::spawn(timed_client(addr, path, Arc::clone(&stop), answer, origin))
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    stop.store(true, Ordering::Relaxed);
    let mut all = Vec::new();
    for t in tasks {
        for r in t.await.expect("client") {
            all.push(r.expect("a good answer"));
        }
    }
    all.sort_by_key(|(_, took)| std::cmp::Reverse(*took));
    let slow = &all[..(all.len() / 100).max(1)];
    let mut tenths = [0usize; 10];
    let mut windows = std::collections::BTreeSet::new();
    for (at, _) in slow {
        tenths[(at.subsec_millis() / 100) as usize] += 1;
        windows.insert(at.as_millis() / 100);
    }
    format!(
        "{} slowest of {} (from {:.2} ms): by tenth of a second {:?}, in {} of {} 100 ms windows",
        slow.len(),
        all.len(),
        slow.last().map_or(0.0, |(_, t)| t.as_secs_f64() * 1e3),
        tenths,
        windows.len(),
        secs * 10
    )
}

/// What a good answer is.
#[derive(Clone, Copy)]
pub enum Answer {
    /// The A2A task, completed with "echo: hello".
    Task,
    /// `wasmtime serve`'s proxy: "hello".
    Hello,
}

impl Answer {
    pub fn is(self, text: &str) -> bool {
        match self {
            Answer::Task => text.contains("TASK_STATE_COMPLETED") && text.contains("echo: hello"),
            Answer::Hello => text == "hello",
        }
    }
}

pub async fn level(addr: &str, path: &str, clients: usize, secs: u64, answer: Answer) -> Figures {
    run_clients(clients, secs, |id, stop| {
        client(addr.to_string(), path.to_string(), id, stop, answer)
    })
    .await
}

/// Throughput and percentiles of one level's requests (`None`: failed).
pub fn figures(results: Vec<Option<Duration>>, elapsed: f64) -> Figures {
    let errors = results.iter().filter(|r| r.is_none()).count();
    let mut lat: Vec<f64> = results
        .into_iter()
        .flatten()
        .map(|d| d.as_secs_f64() * 1e3)
        .collect();
    lat.sort_by(f64::total_cmp);
    let pct = |p: f64| {
        lat.get(((lat.len() as f64 * p) as usize).min(lat.len().saturating_sub(1)))
            .copied()
            .unwrap_or(f64::NAN)
    };
    Figures {
        requests: lat.len(),
        errors,
        per_sec: lat.len() as f64 / elapsed,
        p50_ms: pct(0.50),
        p99_ms: pct(0.99),
    }
}

/// Starts the conformance capsule as route `bench` in `daemon` (the agent
/// every A2A benchmark sends to); the gateway's address.
pub async fn start_bench_capsule(daemon: &crate::harness::Daemon) -> String {
    let addr = daemon.client.health().await.expect("health").a2a_addr;
    let dir = crate::harness::conformance(
        daemon.root.path(),
        "bench",
        "{task_acceptance: queue, after_task: sleep, queue_depth: 512, concurrency: 128}",
        "",
    );
    daemon
        .client
        .start(&crate::harness::request(&dir))
        .await
        .expect("start");
    addr
}

/// A task whose message is "hello", as the broker names it.
pub struct Hello<'a> {
    pub id: &'a str,
    pub session_id: &'a str,
    pub route: &'a str,
    pub context_id: &'a str,
    pub message_id: &'a str,
}

/// Queues `task`'s record as the broker does for a blocking send to a
/// session that waits for it (`working` at once); `dedupe`: look for its
/// message id on the route first.
pub fn queue_hello(
    store: &roostd::store::Store,
    task: Hello<'_>,
    dedupe: bool,
) -> roostd::store::TaskInsert {
    let parts = [serde_json::json!({"text": "hello"})];
    let message = serde_json::json!({"messageId": task.message_id, "role": "ROLE_USER",
                                     "contextId": task.context_id, "parts": parts})
    .to_string();
    let (_, insert) = store.queue_a2a_task(
        &roostd::tasks::model::NewA2aTask {
            id: task.id,
            session_id: task.session_id,
            route: task.route,
            owner: "",
            context_id: task.context_id,
            message_id: task.message_id,
            text: "hello",
            message_json: &message,
            parts: &parts,
            tick: None,
        },
        true,
        dedupe,
    );
    insert
}

/// Writes task `id`'s end as the broker does when the conformance capsule
/// answers "hello" (the answer, then `completed`); `urgent`: a client
/// waits for it. Answers whether it was written.
pub fn answer(
    store: &roostd::store::Store,
    id: &str,
    urgent: bool,
) -> tokio::sync::oneshot::Receiver<bool> {
    use roostd::tasks::model::{ANSWER_ARTIFACT, EventKind, TaskState};
    let (done, ended) = tokio::sync::oneshot::channel();
    let events = vec![
        EventKind::Artifact {
            artifact_id: ANSWER_ARTIFACT.into(),
            text: "echo: hello".into(),
            append: false,
            last_chunk: true,
            part: None,
        },
        EventKind::Status {
            state: TaskState::Completed,
            message: None,
            parts: None,
        },
    ];
    store.append_task_events_then(id, events, urgent, move |written| {
        let _ = done.send(written.is_ok());
    });
    ended
}
