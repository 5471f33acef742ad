//! Removing what ended: `roostctl rm` (refuses a live session unless
//! forced), `roostctl prune` (a dry run changes nothing) and the background
//! `retention:` bounds, which keep a session while its A2A tasks are kept.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::a2a::{http, message, rpc};
use crate::harness::{Daemon, TEST_CONFIG, capsule, code, conformance, request, spinner};

const SERVE: &str = "{task_acceptance: queue, after_task: sleep}";

/// A blocking `SendMessage`; the completed task's id.
async fn send(addr: &str, route: &str, id: &str) -> String {
    let reply = rpc(
        addr,
        route,
        Some("1.0"),
        "SendMessage",
        json!({"message": message(id, "hi")}),
    )
    .await;
    assert_eq!(
        reply["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{reply}"
    );
    reply["result"]["task"]["id"]
        .as_str()
        .expect("task id")
        .to_string()
}

fn session_dir(d: &Daemon, id: &str) -> std::path::PathBuf {
    d.state_dir.join("sessions").join(id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rm_refuses_a_live_session_unless_forced_and_deletes_everything_it_recorded() {
    let d = Daemon::start().await;
    let addr = d.client.health().await.expect("health").a2a_addr;
    let keeper_dir = conformance(d.root.path(), "keeper", SERVE, "");
    let keeper = d.client.start(&request(&keeper_dir)).await.expect("start");
    let task = send(&addr, "keeper", "m-1").await;
    let hello = d
        .run_to_end(&capsule(d.root.path(), "hello", "hello", ""))
        .await;
    assert!(session_dir(&d, &hello.id).is_dir());

    // Live: refused, and nothing changes.
    let err = d.client.remove("keeper", false).await.expect_err("live");
    assert_eq!(code(&err), "session_live", "{err}");
    assert!(err.to_string().contains("--force"), "{err}");
    assert!(
        !d.client
            .get(&keeper.id)
            .await
            .expect("get")
            .state
            .is_ended()
    );
    let got = rpc(&addr, "keeper", Some("1.0"), "GetTask", json!({"id": task})).await;
    assert!(got["result"].is_object(), "{got}");

    // Ended: its row, events and directory go.
    let removed = d.client.remove(&hello.id, false).await.expect("rm");
    assert_eq!(removed.id, hello.id);
    assert_eq!(
        code(&d.client.get(&hello.id).await.expect_err("gone")),
        "not_found"
    );
    assert!(!session_dir(&d, &hello.id).exists(), "directory removed");

    // Forced: stopped first, then deleted with its A2A tasks.
    let removed = d.client.remove("keeper", true).await.expect("rm --force");
    assert_eq!(removed.id, keeper.id);
    assert!(removed.state.is_ended(), "{removed:?}");
    assert!(!session_dir(&d, &keeper.id).exists());
    let (status, _, body) = http(
        &addr,
        "GET",
        &format!("/a2a/keeper/tasks/{task}"),
        &[("A2A-Version", "1.0")],
        "",
    )
    .await;
    assert_eq!(status, 404, "the route is gone with its tasks: {body}");
    assert!(
        d.client.list(true).await.expect("list").is_empty(),
        "nothing left"
    );
    let err = d.client.remove("keeper", false).await.expect_err("twice");
    assert_eq!(code(&err), "not_found");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prune_deletes_ended_sessions_older_than_asked_and_a_dry_run_changes_nothing() {
    let d = Daemon::start().await;
    let hello = capsule(d.root.path(), "hello", "hello", "");
    let first = d.run_to_end(&hello).await;
    let second = d.run_to_end(&hello).await;
    let live = d.start_capsule(&spinner(d.root.path())).await;
    d.wait_running(&live.id).await;

    let recent = roost_ctl::api::PruneRequest {
        older_than_secs: 3600,
        dry_run: false,
    };
    let report = d.client.prune(&recent).await.expect("prune");
    assert!(report.sessions.is_empty(), "nothing ended an hour ago");

    let dry = roost_ctl::api::PruneRequest {
        older_than_secs: 0,
        dry_run: true,
    };
    let report = d.client.prune(&dry).await.expect("dry run");
    let mut ids: Vec<_> = report.sessions.iter().map(|s| s.id.clone()).collect();
    ids.sort();
    let mut want = vec![first.id.clone(), second.id.clone()];
    want.sort();
    assert_eq!(ids, want, "the ended ones, not the live one");
    assert!(report.dry_run);
    assert_eq!(d.client.list(true).await.expect("list").len(), 3);
    assert!(
        session_dir(&d, &first.id).is_dir(),
        "a dry run deletes nothing"
    );

    let report = d
        .client
        .prune(&roost_ctl::api::PruneRequest::default())
        .await
        .expect("prune");
    assert_eq!(report.sessions.len(), 2, "{report:?}");
    let left = d.client.list(true).await.expect("list");
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].id, live.id);
    for id in [&first.id, &second.id] {
        assert!(!session_dir(&d, id).exists(), "{id} directory removed");
    }
    assert!(session_dir(&d, &live.id).is_dir());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_prunes_ended_sessions_but_keeps_one_whose_tasks_are_kept() {
    let config = format!(
        "{TEST_CONFIG}retention: {{interval_secs: 1, tasks: {{max_age_secs: 0, max_count: 0}}, \
         sessions: {{max_age_secs: 0, max_count: 1}}}}\n"
    );
    let d = Daemon::start_with(&config, &[]).await;
    let addr = d.client.health().await.expect("health").a2a_addr;
    let hello = capsule(d.root.path(), "hello", "hello", "");
    let mut ended = Vec::new();
    for _ in 0..3 {
        ended.push(d.run_to_end(&hello).await.id);
    }
    // The newest ended session: it took an A2A task, which is kept.
    let once_dir = conformance(
        d.root.path(),
        "once",
        "{task_acceptance: single, after_task: exit}",
        "",
    );
    let once = d.client.start(&request(&once_dir)).await.expect("start");
    let task = send(&addr, "once", "m-once").await;
    d.client.wait(&once.id).await.expect("ends");
    let live = d.start_capsule(&spinner(d.root.path())).await;

    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let all = d.client.list(true).await.expect("list");
        if all.len() == 2 {
            let mut ids: Vec<_> = all.iter().map(|s| s.id.as_str()).collect();
            ids.sort_unstable();
            let mut want = vec![once.id.as_str(), live.id.as_str()];
            want.sort_unstable();
            assert_eq!(ids, want);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never pruned: {all:?}\n{}",
            d.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for id in &ended {
        assert!(!session_dir(&d, id).exists(), "{id} directory removed");
    }
    let got = rpc(&addr, "once", Some("1.0"), "GetTask", json!({"id": task})).await;
    assert_eq!(
        got["result"]["status"]["state"], "TASK_STATE_COMPLETED",
        "the kept task stays readable: {got}"
    );
    assert!(d.log().contains("pruned (retention)"), "{}", d.log());
    assert!(!d.log().contains("deprecated"));
}
