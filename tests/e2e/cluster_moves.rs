//! Sessions moved on purpose between the nodes of a cluster (a real
//! `nats-server -js`): placed on a node when started (`--node`, `auto`,
//! `--label`), and moved off a node before maintenance (`roostctl drain`)
//! with every task they had queued, none run twice.

use std::time::Duration;

use roost_wire::api::{SessionState, StartRequest};

use crate::cluster::{nats, node_config};
use crate::cluster_failover::{LIFECYCLE, ends, gateway, node_of, runs, send_recorded};
use crate::harness::{Daemon, conformance, request};

/// Whether node `d` runs (or ran) session `id` itself: its own list (a
/// call on the session would be answered by whichever node has it).
async fn holds(d: &Daemon, id: &str) -> bool {
    let listed = d.client.list(true).await.expect("list");
    listed.iter().any(|s| s.id == id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drained_nodes_sessions_move_with_their_queued_tasks_and_every_task_completes() {
    let Some(nats) = nats() else { return };
    let a = Daemon::start_with(&node_config(&nats, "a"), &[]).await;
    let b = Daemon::start_with(&node_config(&nats, "b"), &[]).await;
    let c = Daemon::start_with(&node_config(&nats, "c"), &[]).await;
    let a_addr = gateway(&a).await;
    let c_addr = gateway(&c).await;
    let work = tempfile::tempdir().expect("workdir");
    let dir = conformance(a.root.path(), "moving", LIFECYCLE, "");
    // Any restart policy moves (a drain is not a failure).
    let session = a
        .client
        .start(&StartRequest {
            name: Some("moving".into()),
            node: Some("a".into()),
            workdir: Some(work.path().display().to_string()),
            ..request(&dir)
        })
        .await
        .expect("start");
    let acked = send_recorded(&a_addr, "moving", 60, 200).await;
    // Most are still queued when the drain starts.
    let last = crate::a2a::rpc(
        &a_addr,
        "moving",
        Some("1.0"),
        "GetTask",
        serde_json::json!({"id": acked[59]}),
    )
    .await;
    assert_eq!(
        last["result"]["status"]["state"], "TASK_STATE_SUBMITTED",
        "{last}"
    );
    // Asked of node c; node a does it.
    let report = c
        .client
        .drain(&roost_wire::api::DrainRequest {
            node: "a".into(),
            timeout_secs: Some(30),
        })
        .await
        .unwrap_or_else(|e| panic!("drain: {e}\n{}", a.log()));
    assert_eq!(report.sessions.len(), 1, "{report:?}");
    let moved = &report.sessions[0];
    let to = moved
        .to
        .clone()
        .unwrap_or_else(|| panic!("not moved: {moved:?}\n{}", a.log()));
    assert!(to == "b" || to == "c", "{to}");
    assert_eq!(moved.id, session.id);
    // Every task completes, none ran twice: the running ones finished on
    // a, the queued ones ran where the session went.
    let ended = ends(
        &c_addr,
        "moving",
        &acked,
        Duration::from_secs(120),
        &[&a, &b, &c],
    )
    .await;
    let runs = runs(work.path());
    for (id, (state, why)) in acked.iter().zip(&ended) {
        assert_eq!(state, "TASK_STATE_COMPLETED", "task {id}: {why}");
        assert_eq!(runs.get(id).copied().unwrap_or(0), 1, "task {id}");
    }
    let held = node_of(&c, "moving").await.expect("route");
    assert_eq!((held.0.as_str(), held.2), (to.as_str(), true));
    // The drained node takes no new session; one asked of it without a
    // node goes to another, and a's API answers for it there.
    let other = conformance(a.root.path(), "late", LIFECYCLE, "");
    let refused = a
        .client
        .start(&StartRequest {
            node: Some("a".into()),
            ..request(&other)
        })
        .await
        .expect_err("draining");
    assert!(refused.to_string().contains("drained"), "{refused}");
    let late = a.client.start(&request(&other)).await.expect("placed");
    let on_b = holds(&b, &late.id).await;
    let on_c = holds(&c, &late.id).await;
    assert!(on_b != on_c, "on exactly one of b and c");
    assert_eq!(a.client.get(&late.id).await.expect("carried").name, "late");
    // Draining a node no one runs is a clear error.
    let none = c
        .client
        .drain(&roost_wire::api::DrainRequest {
            node: "nosuch".into(),
            timeout_secs: None,
        })
        .await
        .expect_err("no such node");
    assert!(
        none.to_string().contains("no live node is named 'nosuch'"),
        "{none}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_is_placed_on_the_node_asked_or_the_one_with_room() {
    let Some(nats) = nats() else { return };
    let a = Daemon::start_with(&node_config(&nats, "a"), &[]).await;
    let b = Daemon::start_with(
        &node_config(&nats, "b").replace("zone: z1", "zone: z2"),
        &[],
    )
    .await;
    let dir = conformance(a.root.path(), "placed", LIFECYCLE, "");
    // Asked of a, started on b: b records it and runs its route.
    let session = a
        .client
        .start(&StartRequest {
            name: Some("placed".into()),
            node: Some("b".into()),
            ..request(&dir)
        })
        .await
        .unwrap_or_else(|e| panic!("placed start: {e}\n{}", b.log()));
    assert!(holds(&b, &session.id).await, "on b");
    assert!(!holds(&a, &session.id).await, "not on a");
    let held = node_of(&a, "placed").await.expect("route");
    assert_eq!(held.0, "b");
    // By label: only b is in zone z2.
    let zoned = a
        .client
        .start(&StartRequest {
            name: Some("zoned".into()),
            node: Some("auto".into()),
            node_labels: [("zone".to_string(), "z2".to_string())].into(),
            ..request(&dir)
        })
        .await
        .expect("zoned start");
    assert!(holds(&b, &zoned.id).await, "zone z2 is b");
    // b now runs two sessions, a none: auto picks a (the most room).
    tokio::time::sleep(Duration::from_secs(2)).await; // a heartbeat carries the load
    let roomy = b
        .client
        .start(&StartRequest {
            name: Some("roomy".into()),
            node: Some("auto".into()),
            ..request(&dir)
        })
        .await
        .expect("auto start");
    assert!(holds(&a, &roomy.id).await, "auto placed it on a");
    // Without --node: the node with the most room too (a, asked of b),
    // and b's API answers for it: a call on one session is carried to the
    // node that runs it.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let spinner = crate::harness::spinner(b.root.path());
    let default = b.client.start(&request(&spinner)).await.expect("default");
    assert!(holds(&a, &default.id).await, "placed on a");
    let seen = b.client.get(&default.id).await.expect("carried get");
    assert_eq!(
        (seen.id.as_str(), seen.state),
        (default.id.as_str(), SessionState::Running)
    );
    let follow = b
        .client
        .logs(&default.id, true, |_| {})
        .await
        .expect_err("followed elsewhere");
    assert!(follow.to_string().contains("runs on node a"), "{follow}");
    b.client.stop(&default.id).await.expect("carried stop");
    let ended = b.client.wait(&default.id).await.expect("carried wait");
    assert!(ended.state.is_ended(), "{ended:?}");
    // An id no node has is still this node's plain 404.
    let unknown = b.client.get("ses_nosuch").await.expect_err("unknown");
    assert!(unknown.to_string().contains("ses_nosuch"), "{unknown}");
    // Clear refusals, nothing started.
    for (node, labels, says) in [
        ("nosuch", vec![], "no live node is named 'nosuch'"),
        (
            "a",
            vec![("zone", "z9")],
            "does not have the labels asked (zone=z9)",
        ),
        (
            "auto",
            vec![("zone", "z9")],
            "no live node that is not being drained has the labels",
        ),
    ] {
        let refused = a
            .client
            .start(&StartRequest {
                name: Some("refused".into()),
                node: Some(node.into()),
                node_labels: labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                ..request(&dir)
            })
            .await
            .expect_err("refused");
        assert!(refused.to_string().contains(says), "{refused}");
    }
    // The error of a start the other node refused comes back as it gave it.
    let bad = a
        .client
        .start(&StartRequest {
            path: "/nonexistent/capsule".into(),
            node: Some("b".into()),
            ..request(&dir)
        })
        .await
        .expect_err("no capsule on b");
    assert!(bad.to_string().contains("/nonexistent/capsule"), "{bad}");
}
