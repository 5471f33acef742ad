//! Unit tests of statements whose cost must not grow with the store:
//! retention's delete walks no table, triggers included (SQLite's own count
//! of full-scan steps, with a control that shows the count sees a walk
//! inside a trigger), and start-up's read of hibernated sessions with tasks
//! goes from the sessions to their tasks.

use rusqlite::StatementStatus;

use super::tests::{insert, new_task, request};
use super::*;
use crate::tasks::model::{EventKind, NewA2aTask, TaskState};
use roost_wire::api::SessionState;

/// Migration 0013's trigger, whose check for another task of the context
/// no index covers: the control.
const WALKING_TRIGGER: &str = "DROP TRIGGER conversation_after_last_task;
    CREATE TRIGGER conversation_after_last_task AFTER DELETE ON tasks
    WHEN OLD.route IS NOT NULL
    BEGIN
        DELETE FROM conversations
        WHERE route = OLD.route AND context_id = OLD.context_id
          AND NOT EXISTS (SELECT 1 FROM tasks WHERE context_id = OLD.context_id
                          AND route = OLD.route);
    END;";

/// The event that ends a task `completed`.
fn completed() -> EventKind {
    EventKind::Status {
        parts: None,
        state: TaskState::Completed,
        message: None,
    }
}

#[sqlx::test(migrations = "../migrations")]
async fn retention_deletes_tasks_with_conversations_without_walking_the_table(pool: SqlitePool) {
    let path = pool.connect_options().get_filename().to_path_buf();
    let store = Store::from_pool(pool).expect("store");
    insert(&store, "ses_1", "hello", &request()).await;
    // An agent route that keeps a conversation per context, a task each;
    // the first 40 end (in id order), the last 20 are still working.
    let ids: Vec<String> = (0..60).map(|i| format!("tsk_{i:04}")).collect();
    let contexts: Vec<String> = (0..60).map(|i| format!("ctx_{i:04}")).collect();
    for (i, (id, context_id)) in ids.iter().zip(&contexts).enumerate() {
        store
            .insert_a2a_task(&NewA2aTask {
                context_id,
                ..new_task(id)
            })
            .await
            .expect("task");
        store
            .save_conversation("hello", context_id, Conversation::default())
            .await
            .expect("conversation");
        if i < 40 {
            store
                .append_task_event(id, &completed())
                .await
                .expect("ended");
        }
    }
    // Retention's own statement, on a connection as the writer opens it.
    let conn = rusqlite::Connection::open(&path).expect("open");
    conn.execute_batch("PRAGMA foreign_keys = ON; PRAGMA busy_timeout = 5000;")
        .expect("pragmas");
    let bound = |id: &str| -> (String, String) {
        let at: String = conn
            .query_row("SELECT ended_at FROM tasks WHERE id = ?1", [id], |r| {
                r.get(0)
            })
            .expect("ended_at");
        (at, id.to_string())
    };
    let walked = |conn: &rusqlite::Connection| {
        conn.prepare_cached(&writes::prune_statement())
            .expect("statement")
            .get_status(StatementStatus::FullscanStep)
    };
    let has_conversation = |i: usize| {
        let store = store.clone();
        let context_id = contexts[i].clone();
        async move {
            store
                .conversation("hello", &context_id)
                .await
                .expect("read")
                .is_some()
        }
    };

    let before = bound("tsk_0020");
    assert_eq!(writes::prune(&conn, &before).expect("prune"), 20);
    assert_eq!(
        walked(&conn),
        0,
        "no table walked, the trigger's check included"
    );
    assert!(
        !has_conversation(19).await,
        "a context's last task took its conversation"
    );
    assert!(
        has_conversation(20).await,
        "a kept task's conversation stays"
    );

    // The control: the same delete with 0013's trigger walks the table.
    // Every ended task left: the 20 still working stay.
    let before = ("9999".to_string(), String::new());
    conn.execute_batch(WALKING_TRIGGER).expect("old trigger");
    assert_eq!(writes::prune(&conn, &before).expect("prune"), 20);
    assert!(
        walked(&conn) > 0,
        "the count sees a trigger's walk, so the check above can fail"
    );
    assert!(
        !has_conversation(39).await,
        "the old trigger dropped it as well"
    );
    assert!(has_conversation(40).await);
}

#[sqlx::test(migrations = "../migrations")]
async fn start_up_finds_hibernated_sessions_with_tasks_from_the_sessions(pool: SqlitePool) {
    let path = pool.connect_options().get_filename().to_path_buf();
    let store = Store::from_pool(pool).expect("store");
    // Asleep with a task that never started; asleep with only an ended
    // one; awake with one that never started.
    for (session, name) in [("ses_1", "a"), ("ses_2", "b"), ("ses_3", "c")] {
        insert(&store, session, name, &request()).await;
        store.mark_running(session).await.expect("running");
    }
    for (id, session) in [("tsk_1", "ses_1"), ("tsk_2", "ses_2"), ("tsk_3", "ses_3")] {
        store
            .insert_a2a_task(&NewA2aTask {
                session_id: session,
                ..new_task(id)
            })
            .await
            .expect("task");
    }
    store
        .append_task_event("tsk_2", &completed())
        .await
        .expect("ended");
    for session in ["ses_1", "ses_2"] {
        assert!(
            store
                .mark_hibernated(session, 8, "queue")
                .await
                .expect("asleep")
        );
    }
    let asleep = store.get("ses_1").await.expect("get").expect("row");
    assert_eq!(asleep.state, SessionState::Hibernated);
    assert_eq!(
        store.hibernated_with_tasks().await.expect("read"),
        ["ses_1"]
    );
    let conn = rusqlite::Connection::open(&path).expect("open");
    let plan_of = |sql: &str| -> Vec<String> {
        conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
            .expect("plan")
            .query_map([], |r| r.get::<_, String>(3))
            .expect("rows")
            .collect::<Result<_, _>>()
            .expect("plan rows")
    };
    // The control: the join as it was walks every task's entry.
    let joined = plan_of(
        "SELECT DISTINCT t.session_id FROM tasks t JOIN hibernations h \
         ON h.session_id = t.session_id WHERE t.source = 'a2a' AND t.state = 'submitted'",
    );
    assert!(joined.iter().any(|p| p.starts_with("SCAN t")), "{joined:?}");
    let plan = plan_of(hibernations::HIBERNATED_WITH_TASKS);
    assert!(
        plan.iter()
            .any(|p| p.starts_with("SEARCH t USING INDEX tasks_session")),
        "each asleep session's tasks by index: {plan:?}"
    );
    assert!(
        !plan.iter().any(|p| p.starts_with("SCAN t")),
        "no walk of every task: {plan:?}"
    );
}
