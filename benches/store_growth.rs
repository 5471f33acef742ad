//! Benchmark, the store-growth figures of issue 36: the A2A calls a client
//! makes, on an empty store and then, in the same run, on the same roostd
//! with 1,000,000 completed tasks stored (state dir on the real disk,
//! `store.sync: normal`, retention keeping 1,000,000 ended tasks and
//! running every second, so it prunes while the second half measures:
//! a task deleted for each one added, at most a second behind).
//!
//! The fill goes through roostd's own write path (`Store::queue_a2a_task`
//! and the task writer's events, as the broker writes a task that
//! completes), in the bench process while roostd is stopped: 100 routes
//! (one of them `bench`, the route measured, with 10,000), 10,000 contexts
//! of 100 tasks, and one context of `bench`'s with 1,000 tasks.
//!
//! Per store: `GetTask` of stored tasks, `ListTasks` (first page of 50, and
//! a page of 50 half-way down the route's list, reached by its tokens),
//! `SendMessage` on a context with 1,000 earlier tasks (one client; on the
//! empty store a new context), then blocking `SendMessage` at 16 clients;
//! roostd's RSS after each half; the database's size per task.
//!
//! At the end, with roostd stopped: what retention costs alone at that
//! size (20,000 of the oldest deleted through `Store`, µs and bytes
//! written a task, beside the fill's), what clearing the de-duplication
//! entries of the tasks deleted so far costs (`Store::sweep_message_ids`),
//! then the deletes again without the other index whose keys are random
//! to a task's age (`tasks_context`).
//!
//! Then blocking `SendMessage` at 16 clients side by side: on a second
//! roostd, started at the beginning, whose store stays empty, and on the
//! full one, in ABBA order, levels twice as long, each after both roostds
//! have settled (no CPU used for a second: retention has caught up), so
//! neither pays for the other's deletes or checkpoints.
//!
//! `cargo bench -p roostd --bench store_growth -- [TASKS] [SECONDS]`
//! (defaults 1000000, 5). `ROOST_BENCH_CONTEXTS=conversations` fills each
//! context as a conversation, its tasks one after another, instead of
//! spread over the whole fill (`Contexts`). `ROOST_BENCH_PERF=DIR` records
//! the bench process with `perf` (999 Hz, no call graphs) while retention
//! deletes alone at the end, to `DIR/prune-*.data`.

#[path = "store_growth/fill.rs"]
mod fill;
#[allow(dead_code)]
#[path = "../tests/e2e/harness.rs"]
mod harness;
#[allow(dead_code)]
mod idle_agent;
#[allow(dead_code)]
mod load;
#[allow(dead_code)]
#[path = "../tests/e2e/mock_llm.rs"]
mod mock_llm;

use std::path::Path;
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use roost_ctl::api::RestartPolicy;
use roostd::store::{Durability, Store};
use serde_json::{Value, json};

use fill::{BIG, Contexts, fill};
use harness::{Daemon, TEST_CONFIG, conformance};
use idle_agent::{rss_kib, rss_parts_kib};
use load::{Answer, Figures, figures, level};

const PAGE: usize = 50;

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
    let n: usize = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let secs: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(5);
    let config =
        format!("{TEST_CONFIG}retention: {{interval_secs: 1, tasks: {{max_count: {n}}}}}\n");
    let (mut daemon, session) = bench_daemon(&config).await;
    let addr = daemon.client.health().await.expect("health").a2a_addr;
    // A second roostd whose store stays empty, for 16 clients side by side
    // with the full one at the end.
    let (beside, _) = bench_daemon(&config).await;
    let beside_addr = beside.client.health().await.expect("health").a2a_addr;
    let contexts = Contexts::from_env();
    println!("store growth: {n} tasks, {secs} s per load, state on disk, contexts {contexts:?}");

    // A few tasks to read on the empty store.
    for i in 0..200 {
        send(&addr, &format!("seed-{i}"), None).await;
    }
    let empty = measure(&daemon, &addr, secs, None, "empty").await;

    daemon.signal_and_wait(libc::SIGTERM, Duration::from_secs(30));
    let db = daemon.state_dir.join("roost.db");
    let filled = Instant::now();
    let written_before = written();
    let ids = fill(&db, &session.id, n, contexts).await;
    let fill_secs = filled.elapsed().as_secs_f64();
    let fill_bytes = written() - written_before;
    let bytes = db_bytes(&db);
    println!(
        "filled {n} tasks in {fill_secs:.1} s ({:.0}/s); database {:.1} MiB, {:.0} bytes per task",
        n as f64 / fill_secs,
        bytes as f64 / 1048576.0,
        bytes as f64 / n as f64
    );
    daemon.spawn().await;
    let addr = daemon.client.health().await.expect("health").a2a_addr;
    daemon.wait_running(&session.id).await;
    let full = measure(&daemon, &addr, secs, Some(&ids), "1M").await;

    println!();
    println!("| figure | empty store | {n} stored | ratio |");
    println!("|---|---|---|---|");
    for ((name, a), (_, b)) in empty.iter().zip(&full) {
        println!("| {name} | {a:.3} | {b:.3} | {:.2}× |", b / a);
    }
    side_by_side(&beside, &beside_addr, &daemon, &addr, secs * 2, n).await;
    drop(beside);
    daemon.signal_and_wait(libc::SIGTERM, Duration::from_secs(30));
    let store = Store::open(&db, Durability::Normal).await.expect("store");
    let left = store.count_ended_a2a_tasks("9999").await.expect("count");
    println!("ended tasks stored at the end (retention keeps {n}): {left}");
    // What retention costs the writer at this size, alone: the oldest
    // 20,000 deleted as the retention loop deletes them, beside what a
    // task's record and end cost in the fill.
    println!(
        "the fill: {:.0} µs and {:.1} KiB written a task (its record and end, 2,000 queued at a time)",
        fill_secs * 1e6 / n as f64,
        fill_bytes as f64 / 1024.0 / n as f64,
    );
    bound_walks(&store, &db, left).await;
    let left = prune_alone(&store, left, "with every index").await;
    // The de-duplication entries those deletes left (and retention's in
    // the run), cleared as retention clears them once enough have gone.
    let written_before = written();
    let swept = Instant::now();
    let done = store
        .sweep_message_ids()
        .await
        .expect("sweep")
        .expect("no other sweep");
    let secs = swept.elapsed().as_secs_f64();
    let bytes = written() - written_before;
    println!(
        "the sweep of de-duplication entries: {} walked, {} of gone tasks cleared, in {secs:.2} s \
         and {:.1} MiB written: {:.0} µs and {:.2} KiB an entry cleared",
        done.walked,
        done.forgotten,
        bytes as f64 / 1048576.0,
        secs * 1e6 / done.forgotten.max(1) as f64,
        bytes as f64 / 1024.0 / done.forgotten.max(1) as f64,
    );
    // The same without the other index whose keys are random to a task's
    // age (a context's tasks): what it costs a delete.
    let conn = rusqlite::Connection::open(&db).expect("a connection");
    conn.busy_timeout(Duration::from_secs(30))
        .expect("busy timeout");
    conn.execute_batch("DROP INDEX tasks_context;")
        .expect("drop the index");
    drop(conn);
    prune_alone(&store, left, "without tasks_context").await;
    store.close().await;
}

/// A roostd with `config` serving the conformance capsule as route
/// `bench`, and its session.
async fn bench_daemon(config: &str) -> (Daemon, roost_ctl::api::Session) {
    let daemon = Daemon::start_with(config, &[("RUST_LOG", "warn")]).await;
    let dir = conformance(
        daemon.root.path(),
        "bench",
        "{task_acceptance: queue, after_task: sleep, queue_depth: 512, concurrency: 128}",
        "",
    );
    let session = daemon.start_supervised(&dir, RestartPolicy::Always).await;
    (daemon, session)
}

/// Blocking SendMessage at 16 clients on the empty store's roostd and on
/// the full one's (where retention deletes a task for each one added), in
/// ABBA order, each level after both have settled (retention done, no CPU
/// used), so neither level pays for the other's work; the ratio is of both
/// levels of each.
async fn side_by_side(
    empty: &Daemon,
    empty_addr: &str,
    full: &Daemon,
    addr: &str,
    secs: u64,
    n: usize,
) {
    let mut rates = [0.0; 2];
    let mut rows = Vec::new();
    for (which, at) in [(0, empty_addr), (1, addr), (1, addr), (0, empty_addr)] {
        let _ = std::process::Command::new("sync").status();
        idle(empty.pid()).await;
        idle(full.pid()).await;
        let load = level(at, "/a2a/bench", 16, secs, Answer::Task).await;
        assert_eq!(load.errors, 0, "failed sends");
        rates[which] += load.per_sec;
        rows.push(format!(
            "{} {:.0} req/s, p50 {:.2} ms, p99 {:.2} ms",
            ["empty", "full"][which],
            load.per_sec,
            load.p50_ms,
            load.p99_ms
        ));
    }
    println!(
        "SendMessage, 16 clients, {secs} s levels side by side in ABBA order (an empty store \
         beside {n} stored): {}; full ÷ empty {:.2}×",
        rows.join("; "),
        rates[1] / rates[0]
    );
}

/// Waits (up to a minute) until process `pid` has used under 20 ms of CPU
/// in a second.
async fn idle(pid: u32) {
    let cpu = || -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // After the command's `)` come fields 3 on: utime and stime are
        // fields 14 and 15.
        let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let field = |n: usize| fields.get(n - 3).and_then(|v| v.parse::<u64>().ok());
        field(14).unwrap_or(0) + field(15).unwrap_or(0)
    };
    for _ in 0..60 {
        let before = cpu();
        tokio::time::sleep(Duration::from_secs(1)).await;
        // Clock ticks of 10 ms.
        if cpu() - before < 2 {
            return;
        }
    }
}

/// What finding retention's bound for `max_count` = `left` − 20,000 costs:
/// walked from the newest past the tasks kept (as roostd did until issue
/// 36's sixth stop, in SQL here), and as roostd finds it now
/// (`Store::newest_beyond`: the count from `task_counts`, a walk from the
/// oldest over those to delete). Both must name the same task.
async fn bound_walks(store: &Store, db: &Path, left: u64) {
    let keep = left - 20_000;
    let conn = rusqlite::Connection::open(db).expect("a connection");
    let t = Instant::now();
    let before: (String, String) = conn
        .query_row(
            "SELECT ended_at, id FROM tasks WHERE source = 'a2a' AND ended_at IS NOT NULL \
             AND state IN ('completed', 'failed', 'canceled', 'rejected') \
             ORDER BY ended_at DESC, id DESC LIMIT 1 OFFSET ?1",
            [keep as i64],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .expect("a bound");
    let newest = t.elapsed().as_secs_f64() * 1e3;
    let t = Instant::now();
    let now = store.newest_beyond(keep).await.expect("a bound");
    let oldest = t.elapsed().as_secs_f64() * 1e3;
    assert_eq!(now, Some(before), "both walks find the same bound");
    println!(
        "retention's bound for keeping {keep} of {left}: {newest:.1} ms walked from the newest \
         past those kept; {oldest:.2} ms as roostd finds it now (counted from task_counts, \
         walked from the oldest)"
    );
}

/// Deletes the oldest 20,000 of `left` ended tasks as the retention loop
/// does, alone (roostd stopped), and prints what it cost a task; returns
/// how many are left.
async fn prune_alone(store: &Store, left: u64, label: &str) -> u64 {
    let perf = Recording::start(label).await;
    let written_before = written();
    let pruned = Instant::now();
    let deleted = store
        .prune_a2a_tasks(None, Some(left.saturating_sub(20_000)))
        .await
        .expect("prune");
    let secs = pruned.elapsed().as_secs_f64();
    let bytes = written() - written_before;
    if let Some(perf) = perf {
        perf.stop(label);
    }
    println!(
        "retention alone, {label}: {deleted} tasks deleted in {secs:.2} s, {:.0} µs and {:.1} KiB \
         written (WAL and checkpoints) a task",
        secs * 1e6 / deleted.max(1) as f64,
        bytes as f64 / 1024.0 / deleted.max(1) as f64,
    );
    left - deleted
}

/// `perf record` on this process, with `ROOST_BENCH_PERF=DIR`, to
/// `DIR/prune-<label>.data`.
struct Recording {
    perf: std::process::Child,
    data: std::path::PathBuf,
}

impl Recording {
    /// Started, and given half a second to attach; `None` without the
    /// variable.
    async fn start(label: &str) -> Option<Self> {
        let dir = std::env::var_os("ROOST_BENCH_PERF")?;
        std::fs::create_dir_all(&dir).expect("ROOST_BENCH_PERF's directory");
        let data = Path::new(&dir).join(format!("prune-{}.data", label.replace(' ', "-")));
        let _ = std::fs::remove_file(&data);
        let mut perf = std::process::Command::new("perf")
            .args(["record", "-q", "-F", "999", "-p"])
            .arg(std::process::id().to_string())
            .arg("-o")
            .arg(&data)
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("perf record");
        tokio::time::sleep(Duration::from_millis(500)).await;
        if let Ok(Some(status)) = perf.try_wait() {
            panic!("perf record ended before the deletes ({status}): can it record this process?");
        }
        Some(Self { perf, data })
    }

    /// Stops it (as Ctrl-C does) and says where the recording is.
    fn stop(mut self, label: &str) {
        // SAFETY: kill only sends a signal to the child perf started above.
        unsafe { libc::kill(self.perf.id() as i32, libc::SIGINT) };
        let _ = self.perf.wait();
        let recorded = std::fs::metadata(&self.data).is_ok_and(|m| m.len() > 0);
        assert!(recorded, "perf wrote nothing to {}", self.data.display());
        println!(
            "retention alone, {label}: recorded in {} (perf report -i it --sort comm,dso)",
            self.data.display()
        );
    }
}

/// The figures of one store, in order: name, value.
async fn measure(
    daemon: &Daemon,
    addr: &str,
    secs: u64,
    stored: Option<&[String]>,
    label: &str,
) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    // GetTask of tasks the store holds (spread over all of them).
    let ids: Vec<String> = match stored {
        Some(ids) => ids.to_vec(),
        None => list_ids(addr).await,
    };
    let get = serial(addr, 2000, |i| {
        let id = &ids[(i * 7919) % ids.len()];
        json!({"jsonrpc": "2.0", "id": i, "method": "GetTask", "params": {"id": id}})
    })
    .await;
    out.push(("GetTask p50 ms".into(), get.p50_ms));
    out.push(("GetTask p99 ms".into(), get.p99_ms));
    // ListTasks: the first page, and one half-way down by its tokens.
    let first = serial(
        addr,
        500,
        |i| json!({"jsonrpc": "2.0", "id": i, "method": "ListTasks", "params": {"pageSize": PAGE}}),
    )
    .await;
    out.push(("ListTasks first page p50 ms".into(), first.p50_ms));
    out.push(("ListTasks first page p99 ms".into(), first.p99_ms));
    let (token, depth) = halfway(addr).await;
    let deep = serial(addr, 500, |i| {
        json!({"jsonrpc": "2.0", "id": i, "method": "ListTasks",
               "params": {"pageSize": PAGE, "pageToken": token}})
    })
    .await;
    println!("{label}: the deep page starts after task {depth}");
    out.push(("ListTasks deep page p50 ms".into(), deep.p50_ms));
    out.push(("ListTasks deep page p99 ms".into(), deep.p99_ms));
    let by_context = serial(addr, 500, |i| {
        json!({"jsonrpc": "2.0", "id": i, "method": "ListTasks",
               "params": {"pageSize": PAGE, "contextId": BIG}})
    })
    .await;
    out.push(("ListTasks of one context p50 ms".into(), by_context.p50_ms));
    // SendMessage on a context with 1,000 earlier tasks (one client).
    let in_context = serial(addr, 300, |i| {
        json!({"jsonrpc": "2.0", "id": i, "method": "SendMessage", "params": {"message": {
            "messageId": format!("ctx-{label}-{i}"), "role": "ROLE_USER", "contextId": BIG,
            "parts": [{"text": "hello"}]}}})
    })
    .await;
    out.push((
        "SendMessage in a big context p50 ms".into(),
        in_context.p50_ms,
    ));
    out.push((
        "SendMessage in a big context p99 ms".into(),
        in_context.p99_ms,
    ));
    // Blocking SendMessage at 16 clients.
    level(addr, "/a2a/bench", 4, 1, Answer::Task).await;
    let load = level(addr, "/a2a/bench", 16, secs, Answer::Task).await;
    assert_eq!(load.errors, 0, "{label}: failed sends");
    out.push(("SendMessage 16 clients req/s".into(), load.per_sec));
    out.push(("SendMessage 16 clients p99 ms".into(), load.p99_ms));
    // GetTask again once retention has pruned what the load added (it
    // runs every 5 s): beside the first pass, which runs while it prunes,
    // this shows what the deletes cost a read.
    tokio::time::sleep(Duration::from_secs(15)).await;
    let quiet = serial(addr, 2000, |i| {
        // The newer half: retention has taken some of the oldest by now.
        let half = ids.len() / 2;
        let id = &ids[half + (i * 7919 + 1) % (ids.len() - half)];
        json!({"jsonrpc": "2.0", "id": i, "method": "GetTask", "params": {"id": id}})
    })
    .await;
    out.push(("GetTask, retention idle, p50 ms".into(), quiet.p50_ms));
    out.push(("GetTask, retention idle, p99 ms".into(), quiet.p99_ms));
    let rss = rss_kib(daemon.pid()) as f64 / 1024.0;
    out.push(("roostd RSS MiB".into(), rss));
    // RSS is roostd's own memory (anonymous) and file-backed pages: its
    // executable's and the database pages its readers have mapped
    // (`mmap_size`: the page cache).
    let (anonymous, file) = rss_parts_kib(daemon.pid());
    out.push(("  of which anonymous MiB".into(), anonymous as f64 / 1024.0));
    out.push(("  of which file-backed MiB".into(), file as f64 / 1024.0));
    for (name, value) in &out {
        println!("{label}: {name}: {value:.3}");
    }
    out
}

/// Ids of the bench route's tasks (the empty store's).
async fn list_ids(addr: &str) -> Vec<String> {
    let r = post(
        addr,
        json!({"jsonrpc": "2.0", "id": 1, "method": "ListTasks",
                             "params": {"pageSize": 100}}),
    )
    .await;
    r["result"]["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .map(|t| t["id"].as_str().expect("id").to_string())
        .collect()
}

/// The token of the page half-way down the route's list, and how many
/// tasks are before it.
async fn halfway(addr: &str) -> (String, u64) {
    let mut token = String::new();
    let mut seen = 0;
    loop {
        let r = post(
            addr,
            json!({"jsonrpc": "2.0", "id": 1, "method": "ListTasks",
                                 "params": {"pageSize": 100, "pageToken": token}}),
        )
        .await;
        let total = r["result"]["totalSize"].as_u64().expect("totalSize");
        seen += r["result"]["tasks"].as_array().map_or(0, Vec::len) as u64;
        token = r["result"]["nextPageToken"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if token.is_empty() || seen >= total / 2 {
            return (token, seen);
        }
    }
}

/// `count` requests one after another on one connection; each must answer
/// without an error.
async fn serial(addr: &str, count: usize, body: impl Fn(usize) -> Value) -> Figures {
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stream.set_nodelay(true).expect("nodelay");
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    let started = Instant::now();
    let mut lat = Vec::with_capacity(count);
    for i in 0..count {
        let req = http::Request::post("/a2a/bench")
            .header("host", addr)
            .header("content-type", "application/json")
            .header("a2a-version", "1.0")
            .body(Full::new(bytes::Bytes::from(body(i).to_string())))
            .expect("request");
        let t = Instant::now();
        sender.ready().await.expect("ready");
        let resp = sender.send_request(req).await.expect("send");
        let bytes = resp.into_body().collect().await.expect("body").to_bytes();
        let answer: Value = serde_json::from_slice(&bytes).expect("json");
        assert!(answer.get("error").is_none(), "{answer}");
        lat.push(Some(t.elapsed()));
    }
    figures(lat, started.elapsed().as_secs_f64())
}

async fn post(addr: &str, body: Value) -> Value {
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    let req = http::Request::post("/a2a/bench")
        .header("host", addr)
        .header("content-type", "application/json")
        .header("a2a-version", "1.0")
        .body(Full::new(bytes::Bytes::from(body.to_string())))
        .expect("request");
    let resp = sender.send_request(req).await.expect("send");
    let bytes = resp.into_body().collect().await.expect("body").to_bytes();
    serde_json::from_slice(&bytes).expect("json")
}

async fn send(addr: &str, id: &str, context: Option<&str>) {
    let mut message = json!({"messageId": id, "role": "ROLE_USER", "parts": [{"text": "hello"}]});
    if let Some(c) = context {
        message["contextId"] = json!(c);
    }
    let r = post(
        addr,
        json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                             "params": {"message": message}}),
    )
    .await;
    assert!(r.get("result").is_some(), "{r}");
}

/// Bytes this process has written through system calls (`wchar`): the
/// store's WAL frames and its checkpoints' copies into the database.
fn written() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("wchar:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// The database and its WAL, in bytes.
fn db_bytes(db: &Path) -> u64 {
    let wal = db.with_extension("db-wal");
    [db, wal.as_path()]
        .iter()
        .filter_map(|p| std::fs::metadata(p).ok())
        .map(|m| m.len())
        .sum()
}
