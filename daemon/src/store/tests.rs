//! Unit tests of `store.rs`.

use super::*;
use crate::tasks::model::{
    ANSWER_ARTIFACT, EventKind, NewA2aTask, PushConfig, PushMade, PushVersion, TaskFilter,
    TaskState,
};
use roost_wire::api::{RestartPolicy, SessionState, SessionUsage, StartRequest};

pub(super) fn request() -> StartRequest {
    StartRequest {
        path: "/caps/hello".into(),
        restart: RestartPolicy::Always,
        ..StartRequest::default()
    }
}

pub(super) async fn insert(store: &Store, id: &str, name: &str, request: &StartRequest) {
    store
        .insert_session(&NewSession {
            id,
            name,
            capsule: "hello",
            version: "0.1.0",
            manifest: "/caps/hello/murmur.yaml",
            workdir: "/w",
            bookkeeping_dir: "/b",
            request,
            artifacts: &[],
            sandbox: "",
        })
        .await
        .expect("insert");
}

#[sqlx::test(migrations = "../migrations")]
async fn transitions_are_recorded_in_order(pool: SqlitePool) {
    let store = Store::from_pool(pool).expect("store");
    let req = request();
    insert(&store, "ses_1", "hello", &req).await;
    store
        .mark_restarting("ses_1", 1, Some("trap: first"))
        .await
        .expect("restarting");
    store.mark_running("ses_1").await.expect("running");
    store
        .mark_ended("ses_1", SessionState::Failed, Some("trap: boom"), None)
        .await
        .expect("ended");
    let s = store.get("hello").await.expect("get").expect("exists");
    assert_eq!(s.state, SessionState::Failed);
    assert_eq!(s.error.as_deref(), Some("trap: boom"));
    assert!(s.ended_at.is_some());
    let states: Vec<String> = store
        .events("ses_1")
        .await
        .expect("events")
        .into_iter()
        .map(|e| e.0)
        .collect();
    assert_eq!(states, ["running", "starting", "running", "failed"]);
}

#[sqlx::test(migrations = "../migrations")]
async fn startup_interrupts_live_sessions_and_finds_resumable(pool: SqlitePool) {
    let store = Store::from_pool(pool).expect("store");
    let always = request();
    let no = StartRequest {
        restart: RestartPolicy::No,
        ..request()
    };
    insert(&store, "ses_a", "a", &always).await;
    store.mark_running("ses_a").await.expect("running");
    insert(&store, "ses_b", "b", &no).await;
    insert(&store, "ses_c", "c", &always).await;
    store
        .mark_ended(
            "ses_c",
            SessionState::Stopped,
            None,
            Some(StopReason::Operator),
        )
        .await
        .expect("stop");
    assert_eq!(store.interrupt_live().await.expect("interrupt"), 2);
    let b = store.get("ses_b").await.expect("get").expect("exists");
    assert_eq!(b.state, SessionState::Interrupted);
    let resumable: Vec<String> = store
        .resumable()
        .await
        .expect("resumable")
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(
        resumable,
        ["ses_a"],
        "operator stops are final; policy no stays down"
    );
    assert_eq!(store.list(false).await.expect("list").len(), 0);
    assert_eq!(store.list(true).await.expect("list").len(), 3);
}

#[sqlx::test(migrations = "../migrations")]
async fn task_use_adds_up_per_task_and_per_session(pool: SqlitePool) {
    let store = Store::from_pool(pool).expect("store");
    insert(&store, "ses_1", "agent", &request()).await;
    for (id, tokens) in [("tsk_1", 10), ("tsk_2", 5)] {
        store
            .insert_task(&NewAgentTask {
                id,
                session_id: "ses_1",
                context_id: "ctx_1",
                source: "task_md",
                input_bytes: 7,
            })
            .await
            .expect("insert task");
        store
            .finish_task(&TaskEnd {
                id,
                session_id: "ses_1",
                state: Some("completed"),
                error: None,
                input_tokens: tokens,
                output_tokens: 1,
                turns: 2,
            })
            .await
            .expect("finish task");
    }
    let tasks = store.tasks("ses_1").await.expect("tasks");
    assert_eq!(tasks.len(), 2);
    assert_eq!((tasks[0].input_tokens, tasks[0].turns), (10, 2));
    assert_eq!(tasks[1].state, "completed");
    let s = store.get("ses_1").await.expect("get").expect("exists");
    assert_eq!(
        s.usage,
        SessionUsage {
            input_tokens: 15,
            output_tokens: 2,
            turns: 4
        }
    );
}

#[sqlx::test(migrations = "../migrations")]
async fn name_lookup_prefers_the_live_session(pool: SqlitePool) {
    let store = Store::from_pool(pool).expect("store");
    let req = request();
    insert(&store, "ses_old", "hello", &req).await;
    store
        .mark_ended("ses_old", SessionState::Completed, None, None)
        .await
        .expect("end");
    insert(&store, "ses_new", "hello", &req).await;
    let s = store.get("hello").await.expect("get").expect("exists");
    assert_eq!(s.id, "ses_new");
    assert!(store.get("nobody").await.expect("get").is_none());
}

pub(super) fn new_task<'a>(id: &'a str) -> NewA2aTask<'a> {
    NewA2aTask {
        id,
        session_id: "ses_1",
        route: "hello",
        owner: "",
        context_id: "ctx_1",
        message_id: id,
        text: "hi",
        message_json: "{}",
        parts: &[],
        tick: None,
    }
}

#[sqlx::test(migrations = "../migrations")]
async fn a_message_retried_on_a_route_gets_its_first_task(pool: SqlitePool) {
    let store = Store::from_pool(pool).expect("store");
    insert(&store, "ses_1", "hello", &request()).await;
    let first = store
        .insert_a2a_task(&NewA2aTask {
            message_id: "msg_retried",
            ..new_task("tsk_first")
        })
        .await
        .expect("first");
    let (retry, insert) = store.queue_a2a_task(
        &NewA2aTask {
            message_id: "msg_retried",
            ..new_task("tsk_retry")
        },
        false,
        true,
    );
    assert_eq!(retry.id, "tsk_retry", "what the retry would have been");
    assert!(!insert.committed().await.expect("answered"), "not written");
    // With message ids not de-duplicated (a2a.dedupe_message_ids: false),
    // the same id makes a task of its own.
    let (_, insert) = store.queue_a2a_task(
        &NewA2aTask {
            message_id: "msg_retried",
            ..new_task("tsk_fresh")
        },
        false,
        false,
    );
    assert!(insert.committed().await.expect("answered"), "written");
    let again = store
        .insert_a2a_task(&NewA2aTask {
            message_id: "msg_retried",
            ..new_task("tsk_again")
        })
        .await
        .expect("retried");
    assert_eq!(again.id, first.id);
    assert!(store.a2a_task("tsk_retry").await.expect("read").is_none());
    // The same message id on another route is another message.
    let other = store
        .insert_a2a_task(&NewA2aTask {
            message_id: "msg_retried",
            route: "elsewhere",
            ..new_task("tsk_other")
        })
        .await
        .expect("other route");
    assert_eq!(other.id, "tsk_other");
    // And from another client of the route (its own token): its own
    // message, and its own task, which the first client does not list.
    let bobs = store
        .insert_a2a_task(&NewA2aTask {
            message_id: "msg_retried",
            owner: "bob",
            ..new_task("tsk_bob")
        })
        .await
        .expect("bob's");
    assert_eq!(bobs.id, "tsk_bob");
    assert_eq!(bobs.owner, "bob");
    let filter = |owner| TaskFilter {
        route: Some("hello"),
        owner,
        limit: 100,
        ..Default::default()
    };
    let (mine, total) = store.a2a_tasks(&filter(Some(""))).await.expect("list");
    assert!(
        mine.iter().all(|t| t.owner.is_empty()) && total == 2,
        "{mine:?}"
    );
    let (his, total) = store.a2a_tasks(&filter(Some("bob"))).await.expect("list");
    assert_eq!((his.len(), total), (1, 1));
    let (all, _) = store.a2a_tasks(&filter(None)).await.expect("list");
    assert_eq!(all.len(), 3, "the operator's view: everyone's");
    assert_eq!(
        store
            .context_owner("hello", "ctx_1")
            .await
            .expect("owner")
            .as_deref(),
        Some("")
    );
}

#[sqlx::test(migrations = "../migrations")]
async fn a_group_commit_numbers_each_tasks_events_and_one_bad_write_fails_alone(pool: SqlitePool) {
    let store = Store::from_pool(pool).expect("store");
    insert(&store, "ses_1", "hello", &request()).await;
    store.insert_a2a_task(&new_task("tsk_a")).await.expect("a");
    let working = EventKind::Status {
        parts: None,
        state: TaskState::Working,
        message: None,
    };
    let done = EventKind::Status {
        parts: None,
        state: TaskState::Completed,
        message: None,
    };
    // Queued together, so mostly committed as one group (the writer's
    // thread may take the first alone); the answers do not depend on it.
    let again_a = NewA2aTask {
        message_id: "msg_other",
        ..new_task("tsk_a")
    };
    let task_b = new_task("tsk_b");
    let (b, dup, w1, w2, end, late) = tokio::join!(
        store.insert_a2a_task(&task_b),
        store.insert_a2a_task(&again_a),
        store.append_task_event("tsk_a", &working),
        store.append_task_event("tsk_b", &working),
        store.append_task_event("tsk_a", &done),
        store.append_task_event("tsk_a", &working),
    );
    assert!(b.is_ok(), "{b:?}");
    assert!(dup.is_err(), "a second task with the same id must fail");
    assert_eq!(w1.expect("w1").expect("written").seq, 2);
    assert_eq!(w2.expect("w2").expect("written").seq, 2);
    assert_eq!(end.expect("end").expect("written").seq, 3);
    assert!(
        late.expect("late").is_none(),
        "an ended task takes no events"
    );
    let a = store.a2a_task("tsk_a").await.expect("get").expect("a");
    assert_eq!(a.state, TaskState::Completed);
    let b = store.a2a_task("tsk_b").await.expect("get").expect("b");
    assert_eq!(b.state, TaskState::Working);
    assert_eq!(store.task_events("tsk_a", 0).await.expect("log").len(), 3);

    // Without a bad write the group goes through in one piece.
    store.insert_a2a_task(&new_task("tsk_c")).await.expect("c");
    let (x, y) = tokio::join!(
        store.append_task_event("tsk_c", &working),
        store.append_task_event("tsk_c", &done),
    );
    assert_eq!(x.expect("x").expect("written").seq, 2);
    assert_eq!(y.expect("y").expect("written").seq, 3);
}

#[sqlx::test(migrations = "../migrations")]
async fn events_keep_the_task_row_in_step_in_one_commit(pool: SqlitePool) {
    let store = Store::from_pool(pool).expect("store");
    insert(&store, "ses_1", "hello", &request()).await;
    store.insert_a2a_task(&new_task("tsk_a")).await.expect("a");
    let artifact = |text: &str, append: bool| EventKind::Artifact {
        artifact_id: ANSWER_ARTIFACT.into(),
        text: text.into(),
        append,
        last_chunk: !append,
        part: None,
    };
    let status = |state, message: Option<&str>| EventKind::Status {
        parts: None,
        state,
        message: message.map(str::to_string),
    };
    // A chunk is not the answer; the whole answer is.
    let written = store
        .append_task_events(
            "tsk_a",
            &[
                status(TaskState::Working, None),
                artifact("par", true),
                artifact("partial answer", false),
                status(TaskState::Completed, None),
            ],
        )
        .await
        .expect("events");
    let seqs: Vec<u64> = written.iter().flatten().map(|e| e.seq).collect();
    assert_eq!(seqs, [2, 3, 4, 5]);
    let a = store.a2a_task("tsk_a").await.expect("get").expect("a");
    assert_eq!(a.state, TaskState::Completed);
    assert_eq!(a.answer.as_deref(), Some("partial answer"));
    assert_eq!(a.updated_at, written[3].as_ref().expect("end").at);

    // A failure's message is the task's error, and it ends the task.
    store.insert_a2a_task(&new_task("tsk_b")).await.expect("b");
    let failed = status(TaskState::Failed, Some("the tool broke"));
    let late = store
        .append_task_events("tsk_b", &[failed, status(TaskState::Working, None)])
        .await
        .expect("events");
    assert!(late[0].is_some() && late[1].is_none(), "{late:?}");
    let tasks = store.tasks("ses_1").await.expect("tasks");
    let b = tasks.iter().find(|t| t.id == "tsk_b").expect("b");
    assert_eq!(b.state, "failed");
    assert_eq!(b.error.as_deref(), Some("the tool broke"));
    assert!(b.ended_at.is_some());
    let a = tasks.iter().find(|t| t.id == "tsk_a").expect("a");
    assert_eq!(a.error, None);
    assert!(a.ended_at.is_some());
}

#[sqlx::test(migrations = "../migrations")]
async fn a_write_that_panics_fails_alone_and_the_writer_goes_on(pool: SqlitePool) {
    let store = Store::from_pool(pool).expect("store");
    insert(&store, "ses_1", "hello", &request()).await;
    let panicked = store.tasks.write(vec![writer::WriteOp::Panic]).await;
    assert!(
        matches!(panicked, Err(WriteError::Stopped)),
        "its caller hears it: {panicked:?}"
    );
    // The thread goes on: the next task is written and read back (a dead
    // writer would leave this waiting: bounded here so the test fails).
    let task = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        store.insert_a2a_task(&new_task("tsk_after")),
    )
    .await
    .expect("answered")
    .expect("written after the panic");
    assert_eq!(task.id, "tsk_after");
    assert!(store.a2a_task("tsk_after").await.expect("read").is_some());
    store
        .checkpoint()
        .await
        .expect("checkpoint beside the writer");
}

#[sqlx::test(migrations = "../migrations")]
async fn pruning_in_batches_keeps_the_newest_ended_tasks_and_every_live_one(pool: SqlitePool) {
    let store = Store::from_pool(pool).expect("store");
    insert(&store, "ses_1", "hello", &request()).await;
    let done = EventKind::Status {
        parts: None,
        state: TaskState::Completed,
        message: None,
    };
    let count = writes::PRUNE_BATCH as usize * 2 + 7;
    for i in 0..count {
        let id = format!("tsk_{i:04}");
        store.insert_a2a_task(&new_task(&id)).await.expect("task");
        store.append_task_event(&id, &done).await.expect("ended");
    }
    store
        .insert_a2a_task(&new_task("tsk_live"))
        .await
        .expect("live");
    let deleted = store.prune_a2a_tasks(None, Some(5)).await.expect("pruned");
    assert_eq!(deleted as usize, count - 5, "over several batches");
    let (left, total) = store
        .a2a_tasks(&TaskFilter {
            limit: 100,
            ..TaskFilter::default()
        })
        .await
        .expect("list");
    assert_eq!(total, 6, "five ended and the live one");
    let mut ids: Vec<&str> = left.iter().map(|t| t.id.as_str()).collect();
    ids.sort_unstable();
    let newest: Vec<String> = (count - 5..count).map(|i| format!("tsk_{i:04}")).collect();
    let mut want: Vec<&str> = newest.iter().map(String::as_str).collect();
    want.push("tsk_live");
    want.sort_unstable();
    assert_eq!(ids, want);
    assert!(
        store
            .task_events("tsk_0000", 0)
            .await
            .expect("log")
            .is_empty(),
        "a pruned task's log goes with it"
    );
}

/// Size of the WAL file after 1.5 s of steady session writes from four
/// writers, with the writer checkpointing past `restart_at` frames.
async fn wal_after_steady_writes(restart_at: u64) -> u64 {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("roost.db");
    let store = Store::open(&path, Durability::Normal).await.expect("open");
    store
        .wal
        .restart_at
        .store(restart_at, std::sync::atomic::Ordering::Relaxed);
    let req = request();
    insert(&store, "ses_1", "hello", &req).await;
    let error = "e".repeat(2000);
    let until = std::time::Instant::now() + std::time::Duration::from_millis(1500);
    let writers = (0..4).map(|_| {
        let (store, error) = (store.clone(), error.clone());
        tokio::spawn(async move {
            let mut n = 0u32;
            while std::time::Instant::now() < until {
                n += 1;
                store
                    .mark_restarting("ses_1", n, Some(&error))
                    .await
                    .expect("write");
            }
        })
    });
    for writer in writers.collect::<Vec<_>>() {
        writer.await.expect("writer");
    }
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    let len = std::fs::metadata(&wal).expect("wal").len();
    store.close().await;
    len
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_steady_writes_the_wal_starts_over_and_stays_short() {
    let bounded = wal_after_steady_writes(256).await;
    // The control: with the checkpoint thread alone, steady writes never
    // let a checkpoint reach the end, and the WAL only grows.
    let unbounded = wal_after_steady_writes(u64::MAX).await;
    eprintln!(
        "WAL after steady writes: {bounded} bytes bounded, {unbounded} without the writer's checkpoint"
    );
    // A ceiling, not a target: the writer restarts the WAL past 256
    // frames (about 1 MiB), and on a loaded 2-core machine a restart can
    // wait for the writes in flight (8.2 MiB seen once in CI).
    assert!(bounded < 16 << 20, "{bounded}");
    assert!(unbounded > 4 * bounded, "{unbounded} vs {bounded}");
}

#[sqlx::test(migrations = "../migrations")]
async fn push_deliveries_wake_the_deliverer_and_a_retry_holds_back_its_config(pool: SqlitePool) {
    let store = Store::from_pool(pool).expect("store");
    insert(&store, "ses_1", "hello", &request()).await;
    store.insert_a2a_task(&new_task("tsk_a")).await.expect("a");
    let wake = store.push_wake();
    let working = EventKind::Status {
        parts: None,
        state: TaskState::Working,
        message: None,
    };
    // No config: an event queues nothing and wakes nobody.
    store
        .append_task_event("tsk_a", &working)
        .await
        .expect("event");
    let idle = tokio::time::timeout(std::time::Duration::from_millis(50), wake.notified()).await;
    assert!(idle.is_err(), "nothing was queued");
    assert_eq!(store.next_push_at().await.expect("read"), None);
    let config = PushConfig {
        task_id: "tsk_a".into(),
        id: "cfg".into(),
        url: "http://127.0.0.1:9/hook".into(),
        token: None,
        auth_scheme: None,
        auth_credentials: None,
        version: PushVersion::V03,
    };
    assert_eq!(
        store
            .create_push_config(&config, true, 10)
            .await
            .expect("config"),
        PushMade::Made
    );
    // Kept with the version of the client that made it.
    assert_eq!(
        store.push_configs("tsk_a").await.expect("read")[0].version,
        PushVersion::V03
    );
    // Another config past the task's limit is refused in the write itself.
    let other = PushConfig {
        id: "cfg-2".into(),
        ..config.clone()
    };
    let full = store.create_push_config(&other, false, 1).await;
    assert_eq!(full.expect("write"), PushMade::Full);

    tokio::time::timeout(std::time::Duration::from_secs(5), wake.notified())
        .await
        .expect("the backfill wakes the deliverer");
    store
        .append_task_event("tsk_a", &working)
        .await
        .expect("event");
    tokio::time::timeout(std::time::Duration::from_secs(5), wake.notified())
        .await
        .expect("an event of a task with a config wakes the deliverer");
    // The config's first delivery is due; the ones behind it wait for it.
    let due = store.due_pushes(now_ms(), 16).await.expect("due");
    assert_eq!(due.len(), 1, "{due:?}");
    let later = now_ms() + 600_000;
    store
        .push_retry(due[0].outbox_id, later, "refused")
        .await
        .expect("retry");
    assert!(
        store
            .due_pushes(now_ms(), 16)
            .await
            .expect("due")
            .is_empty()
    );
    assert_eq!(
        store.next_push_at().await.expect("read"),
        Some(later),
        "the next look is at the retry, not at the events queued behind it"
    );
}
