//! Unit tests of where the writer's commits are made (`commit.rs`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{RowChange, Then, WriteOp};
use crate::store::{Durability, Store};

/// The jobs whose `then` ran, in order, with the thread each ran on.
type Seen = Arc<Mutex<Vec<(&'static str, String)>>>;

fn noting(seen: &Seen, job: &'static str) -> Then {
    let seen = Arc::clone(seen);
    Box::new(move |_| {
        let thread = std::thread::current().name().unwrap_or("").to_string();
        seen.lock().expect("seen").push((job, thread));
    })
}

/// What `seen` holds once `n` jobs have run (or after 5 s).
async fn when(seen: &Seen, n: usize) -> Vec<(&'static str, String)> {
    for _ in 0..500 {
        if seen.lock().expect("seen").len() >= n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    seen.lock().expect("seen").clone()
}

/// A durable write: events for a task that does not exist (nothing is
/// written, but under `store.sync: full` its commit is synced).
fn durable() -> Vec<WriteOp> {
    vec![WriteOp::Events {
        task_id: "tsk_none".into(),
        at: "2026-12-04T00:00:00Z".into(),
        events: vec![(
            r#"{"type":"status","state":"working"}"#.into(),
            RowChange::None,
        )],
    }]
}

/// With `store.sync: normal` a write that finds the writer idle is
/// committed on its caller's thread, before `write_then` returns, together
/// with (and after) a lingering write queued before it; commit order is the
/// queue's on whichever thread commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_writer_lets_its_caller_commit_after_what_was_queued_before() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(&dir.path().join("roost.db"), Durability::Normal)
        .await
        .expect("open");
    let me = std::thread::current().name().unwrap_or("").to_string();
    let mut by_caller = 0;
    for _ in 0..100 {
        let seen = Seen::default();
        store
            .tasks
            .write_then(vec![WriteOp::Probe], noting(&seen, "lazy"), false);
        store
            .tasks
            .write_then(durable(), noting(&seen, "urgent"), true);
        let at_once = seen.lock().expect("seen").clone();
        let all = when(&seen, 2).await;
        let order: Vec<_> = all.iter().map(|(job, _)| *job).collect();
        assert_eq!(order, ["lazy", "urgent"], "queue order, on {all:?}");
        if at_once.len() == 2 && all.iter().all(|(_, thread)| *thread == me) {
            by_caller += 1;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert!(
        by_caller > 0,
        "no commit was made by its caller in 100 tries"
    );
}

/// With `store.sync: full` a write whose commit is synced always goes to
/// the writer's thread (no caller's thread waits for the disk); the
/// control: a write that needs no sync, from the same caller on the same
/// store, is committed by the caller.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_synced_commit_is_always_made_on_the_writers_thread() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(&dir.path().join("roost.db"), Durability::Full)
        .await
        .expect("open");
    let me = std::thread::current().name().unwrap_or("").to_string();
    for _ in 0..20 {
        let seen = Seen::default();
        store
            .tasks
            .write_then(durable(), noting(&seen, "durable"), true);
        let all = when(&seen, 1).await;
        assert_eq!(all, [("durable", "roost-store".to_string())]);
    }
    let mut by_caller = 0;
    for _ in 0..100 {
        let seen = Seen::default();
        store
            .tasks
            .write_then(vec![WriteOp::Probe], noting(&seen, "probe"), true);
        if when(&seen, 1).await == [("probe", me.clone())] {
            by_caller += 1;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert!(
        by_caller > 0,
        "no unsynced commit was made by its caller in 100 tries"
    );
}
