//! Unit tests of `message_ids.rs` and migration 0022: de-duplication
//! entries outlive their tasks until a sweep, and find nothing meanwhile.

use std::borrow::Cow;

use super::tests::{insert, new_task, request};
use super::*;
use crate::tasks::model::{EventKind, NewA2aTask, TaskState};

fn message<'a>(id: &'a str, message_id: &'a str) -> NewA2aTask<'a> {
    NewA2aTask {
        message_id,
        ..new_task(id)
    }
}

const MESSAGES: [&str; 12] = [
    "m00", "m01", "m02", "m03", "m04", "m05", "m06", "m07", "m08", "m09", "m10", "m11",
];

async fn entries(store: &Store) -> Vec<(String, String)> {
    sqlx::query_as("SELECT message_id, task_id FROM task_messages ORDER BY message_id")
        .fetch_all(&store.reader)
        .await
        .expect("entries")
}

/// Twelve completed tasks, one per message, `tsk_00`..`tsk_11`; the
/// oldest eight pruned.
async fn twelve_then_pruned(store: &Store) {
    insert(store, "ses_1", "hello", &request()).await;
    let done = EventKind::Status {
        parts: None,
        state: TaskState::Completed,
        message: None,
    };
    for (i, m) in MESSAGES.iter().enumerate() {
        let id = format!("tsk_{i:02}");
        store.insert_a2a_task(&message(&id, m)).await.expect("task");
        store.append_task_event(&id, &done).await.expect("ended");
    }
    let pruned = store.prune_a2a_tasks(None, Some(4)).await.expect("pruned");
    assert_eq!(pruned, 8);
}

#[sqlx::test(migrations = "../migrations")]
async fn a_pruned_tasks_message_is_new_again_and_a_sweep_clears_only_gone_tasks_entries(
    pool: SqlitePool,
) {
    let store = Store::from_pool(pool).expect("store");
    twelve_then_pruned(&store).await;
    // The deletes left the entries (under SWEEP_AFTER deleted: no sweep).
    assert_eq!(entries(&store).await.len(), 12, "left for a sweep");
    // A gone task's message finds nothing: a retry is a new message, as
    // when the entry went with its task.
    assert!(
        store
            .a2a_task_by_message(("hello", ""), "m00")
            .await
            .expect("lookup")
            .is_none()
    );
    let again = store
        .insert_a2a_task(&message("tsk_again", "m00"))
        .await
        .expect("m00 again");
    assert_eq!(again.id, "tsk_again", "written, not the gone task");
    // A kept task's message is still a retry of it.
    let retry = store
        .insert_a2a_task(&message("tsk_retry", "m10"))
        .await
        .expect("m10 again");
    assert_eq!(retry.id, "tsk_10");
    assert!(store.a2a_task("tsk_retry").await.expect("read").is_none());
    // The sweep, in chunks of three (across several rounds): the seven
    // entries of gone tasks go; m00's, taken over by its new task, and
    // the four kept tasks' stay.
    let swept = store.sweep(3).await.expect("swept");
    assert_eq!(
        swept,
        Swept {
            walked: 12,
            forgotten: 7
        }
    );
    let left = entries(&store).await;
    let want: Vec<(String, String)> = [
        ("m00", "tsk_again"),
        ("m08", "tsk_08"),
        ("m09", "tsk_09"),
        ("m10", "tsk_10"),
        ("m11", "tsk_11"),
    ]
    .iter()
    .map(|(m, t)| (m.to_string(), t.to_string()))
    .collect();
    assert_eq!(left, want);
    let found = store
        .a2a_task_by_message(("hello", ""), "m00")
        .await
        .expect("lookup")
        .expect("m00's new task");
    assert_eq!(found.id, "tsk_again");
}

#[sqlx::test(migrations = "../migrations")]
async fn retention_sweeps_once_enough_tasks_have_gone(pool: SqlitePool) {
    let store = Store::from_pool(pool).expect("store");
    twelve_then_pruned(&store).await;
    // Eight went; the sweep waits for SWEEP_AFTER in all.
    store.tasks_gone(message_ids::SWEEP_AFTER - 9);
    store.sweep_if_due().await.expect("not due");
    assert_eq!(entries(&store).await.len(), 12, "not yet");
    store.tasks_gone(1);
    store.sweep_if_due().await.expect("due");
    assert_eq!(entries(&store).await.len(), 4, "the kept tasks' alone");
    // And it starts counting again.
    store.tasks_gone(message_ids::SWEEP_AFTER - 1);
    store.sweep_if_due().await.expect("not due");
    let done = store.sweep_message_ids().await.expect("swept");
    assert_eq!(
        done,
        Some(Swept {
            walked: 4,
            forgotten: 0
        })
    );
}

#[sqlx::test(migrations = "../migrations")]
async fn after_a_restart_the_entries_left_from_before_count_toward_a_sweep(pool: SqlitePool) {
    // Entries of SWEEP_AFTER tasks deleted before the restart (a count kept
    // in memory is gone with it).
    sqlx::query(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1) \
         INSERT INTO task_messages (route, owner, message_id, task_id) \
         SELECT 'hello', '', 'old-' || i, 'tsk_gone_' || i FROM n",
    )
    .bind(message_ids::SWEEP_AFTER as i64)
    .execute(&pool)
    .await
    .expect("entries of deleted tasks");
    let store = Store::from_pool(pool).expect("store");
    twelve_then_pruned(&store).await;
    // That round's eight and the ten thousand before it: due.
    assert_eq!(entries(&store).await.len(), 4, "swept by the prune's round");
}

#[sqlx::test(migrations = "../migrations")]
async fn a_sweep_dropped_midway_leaves_the_next_one_free_to_run(pool: SqlitePool) {
    let store = Store::from_pool(pool).expect("store");
    twelve_then_pruned(&store).await;
    // Polled once (it marks itself running and waits for its first read),
    // then dropped, as when a `roostctl prune` client hangs up.
    // Every reader held, so its first read waits for one.
    let mut held = Vec::new();
    for _ in 0..store.reader.options().get_max_connections() {
        held.push(store.reader.acquire().await.expect("a reader"));
    }
    let mut sweep = Box::pin(store.sweep_message_ids());
    let first = std::future::poll_fn(|cx| std::task::Poll::Ready(sweep.as_mut().poll(cx))).await;
    assert!(first.is_pending(), "still reading when dropped");
    drop(sweep);
    drop(held);
    let swept = store.sweep_message_ids().await.expect("swept");
    assert_eq!(
        swept,
        Some(Swept {
            walked: 12,
            forgotten: 8
        }),
        "not refused as if the dropped one still ran"
    );
}

#[sqlx::test(migrations = false)]
async fn migration_0022_moves_each_messages_first_task_into_its_table(pool: SqlitePool) {
    // The database as 0021 left it, with a message that made two tasks
    // (de-duplication off) and one from another client.
    let all = sqlx::migrate!("../migrations");
    let before = sqlx::migrate::Migrator {
        migrations: Cow::Owned(all.iter().filter(|m| m.version < 22).cloned().collect()),
        ..sqlx::migrate!("../migrations")
    };
    before.run(&pool).await.expect("up to 0021");
    let store = Store::from_pool(pool.clone()).expect("store");
    insert(&store, "ses_1", "hello", &request()).await;
    for (id, owner, message_id) in [
        ("tsk_0193a", "", "m1"),
        ("tsk_0193b", "", "m1"),
        ("tsk_0193c", "bob", "m1"),
        ("tsk_0193d", "", "m2"),
    ] {
        sqlx::query(
            "INSERT INTO tasks (id, session_id, context_id, source, state, input_bytes, \
             created_at, updated_at, route, message_id, owner) \
             VALUES (?1, 'ses_1', 'ctx_1', 'a2a', 'completed', 2, 't', 't', 'hello', ?3, ?2)",
        )
        .bind(id)
        .bind(owner)
        .bind(message_id)
        .execute(&pool)
        .await
        .expect("a task of 0021's");
    }
    all.run(&pool).await.expect("0022");
    let moved: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT owner, message_id, task_id FROM task_messages ORDER BY owner, message_id",
    )
    .fetch_all(&pool)
    .await
    .expect("entries");
    let want = [
        ("", "m1", "tsk_0193a"),
        ("", "m2", "tsk_0193d"),
        ("bob", "m1", "tsk_0193c"),
    ];
    let want: Vec<(String, String, String)> = want
        .iter()
        .map(|(o, m, t)| (o.to_string(), m.to_string(), t.to_string()))
        .collect();
    assert_eq!(moved, want);
    let index: Option<String> =
        sqlx::query_scalar("SELECT name FROM sqlite_master WHERE name = 'tasks_message'")
            .fetch_optional(&pool)
            .await
            .expect("schema");
    assert_eq!(index, None, "the index on tasks is gone");
    // A retry of m1 gets its first task, as before the migration.
    let retry = store
        .insert_a2a_task(&message("tsk_0193e", "m1"))
        .await
        .expect("retry");
    assert_eq!(retry.id, "tsk_0193a");
}
