//! Unit tests of listing A2A tasks (`a2a_tasks`): keyset pages that neither
//! skip nor repeat a task, the count, and a plan that reads the route's
//! index rather than sorting or counting the table.

use super::tests::{insert, new_task, request};
use super::*;
use crate::tasks::model::{NewA2aTask, TaskFilter, TaskState};

#[sqlx::test(migrations = "../migrations")]
async fn pages_after_the_last_task_cover_the_list_once_in_order(pool: SqlitePool) {
    let store = Store::from_pool(pool).expect("store");
    insert(&store, "ses_1", "hello", &request()).await;
    // Inserted back to back: many share their millisecond, so the order
    // (and the keyset) leans on the id too.
    let ids: Vec<String> = (0..25).map(|i| format!("tsk_{i:04}")).collect();
    for (i, id) in ids.iter().enumerate() {
        let owner = if i % 5 == 4 { "bob" } else { "" };
        store
            .insert_a2a_task(&NewA2aTask {
                owner,
                ..new_task(id)
            })
            .await
            .expect("insert");
    }
    let mut seen: Vec<(String, String)> = Vec::new();
    let mut after: Option<(String, String)> = None;
    loop {
        let (page, total) = store
            .a2a_tasks(&TaskFilter {
                route: Some("hello"),
                owner: Some(""),
                limit: 7,
                after: after.as_ref().map(|(u, id)| (u.as_str(), id.as_str())),
                ..Default::default()
            })
            .await
            .expect("page");
        assert_eq!(total, 20, "the count ignores the page");
        seen.extend(
            page.iter()
                .map(|t| (t.updated_at.clone(), t.id.to_string())),
        );
        match page.last() {
            Some(last) if page.len() == 7 => {
                after = Some((last.updated_at.clone(), last.id.to_string()));
            }
            _ => break,
        }
    }
    let mut expected = seen.clone();
    expected.sort_unstable_by(|a, b| b.cmp(a));
    expected.dedup();
    assert_eq!(seen, expected, "newest first, none twice");
    assert_eq!(seen.len(), 20, "every task of the owner's, none of bob's");

    // The other filters, alone and together.
    let count = |f: TaskFilter<'static>| {
        let store = store.clone();
        async move { store.a2a_tasks(&f).await.expect("list").1 }
    };
    let all = TaskFilter {
        route: Some("hello"),
        limit: 1,
        ..Default::default()
    };
    assert_eq!(count(TaskFilter { ..all }).await, 25);
    let submitted = Some(TaskState::Submitted);
    assert_eq!(
        count(TaskFilter {
            state: submitted,
            ..all
        })
        .await,
        25
    );
    let working = Some(TaskState::Working);
    assert_eq!(
        count(TaskFilter {
            state: working,
            ..all
        })
        .await,
        0
    );
    let ctx = Some("ctx_1");
    assert_eq!(
        count(TaskFilter {
            context_id: ctx,
            owner: Some("bob"),
            ..all
        })
        .await,
        5
    );
    let other = Some("elsewhere");
    assert_eq!(
        count(TaskFilter {
            route: other,
            ..all
        })
        .await,
        0
    );
}

/// What SQLite plans for a route's list and its count (the statements
/// `a2a_tasks` runs): the index, no sort of the table, no table rows for
/// the count; a context's list starts from the context's index, and its
/// count reads nothing else.
#[sqlx::test(migrations = "../migrations")]
async fn a_routes_list_and_count_read_its_index(pool: SqlitePool) {
    let plan = |sql: String, binds: Vec<&'static str>| {
        let pool = pool.clone();
        async move {
            let sql = format!("EXPLAIN QUERY PLAN {sql}");
            let mut query = sqlx::query_as::<_, (i64, i64, i64, String)>(&sql);
            for b in binds {
                query = query.bind(b);
            }
            let rows = query.fetch_all(&pool).await.expect("plan");
            rows.into_iter().map(|r| r.3).collect::<Vec<_>>().join("; ")
        }
    };
    let deep = TaskFilter {
        route: Some("r"),
        owner: Some(""),
        limit: 51,
        after: Some(("2026-12-04T16:31:11.123Z", "tsk_1")),
        ..Default::default()
    };
    let list = a2a_tasks::ListSql::new(&deep);
    let page = plan(list.page.clone(), list.binds.clone()).await;
    assert!(page.contains("tasks_route_updated"), "{page}");
    assert!(
        !page.contains("TEMP B-TREE"),
        "sorted, not read in order: {page}"
    );
    let count = plan(list.count, list.count_binds).await;
    assert!(
        count.contains("task_counts"),
        "summed, not counted: {count}"
    );
    let done = TaskFilter {
        state: Some(TaskState::Completed),
        ..deep
    };
    let list = a2a_tasks::ListSql::new(&done);
    let count = plan(list.count, list.count_binds).await;
    assert!(count.contains("task_counts"), "{count}");
    let context = TaskFilter {
        context_id: Some("ctx_1"),
        ..deep
    };
    let list = a2a_tasks::ListSql::new(&context);
    let page = plan(list.page, list.binds).await;
    assert!(page.contains("INDEX tasks_context"), "{page}");
    assert!(
        !page.contains("TEMP B-TREE"),
        "sorted, not read in order: {page}"
    );
    let count = plan(list.count, list.count_binds).await;
    // Counted from the index alone (migration 0021): the route and owner
    // it filters on are in it, so no task's row is read.
    assert!(
        count.contains("COVERING INDEX tasks_context"),
        "the context's rows read to count them: {count}"
    );
}

/// `task_counts` follows every insert, state change and delete: it says
/// what counting the table says.
#[sqlx::test(migrations = "../migrations")]
async fn task_counts_follow_inserts_state_changes_and_deletes(pool: SqlitePool) {
    let store = Store::from_pool(pool.clone()).expect("store");
    insert(&store, "ses_1", "hello", &request()).await;
    let counts = || {
        let pool = pool.clone();
        async move {
            let kept: Vec<(String, String, String, i64)> = sqlx::query_as(
                "SELECT route, owner, state, n FROM task_counts WHERE n <> 0 ORDER BY 1, 2, 3",
            )
            .fetch_all(&pool)
            .await
            .expect("kept");
            let counted: Vec<(String, String, String, i64)> = sqlx::query_as(
                "SELECT route, owner, state, COUNT(*) FROM tasks WHERE source = 'a2a' \
                 GROUP BY 1, 2, 3 ORDER BY 1, 2, 3",
            )
            .fetch_all(&pool)
            .await
            .expect("counted");
            assert_eq!(kept, counted);
            // Retention's bound counts ended tasks from `task_counts`: each
            // in an ended state has its `ended_at` (what `ENDED` indexes).
            let (by_counts, by_index): (i64, i64) = sqlx::query_as(&format!(
                "SELECT ({}), (SELECT COUNT(*) FROM tasks WHERE {})",
                super::writes::ENDED_COUNT,
                super::writes::ENDED
            ))
            .fetch_one(&pool)
            .await
            .expect("ended");
            assert_eq!(by_counts, by_index);
            kept.len()
        }
    };
    let ids: Vec<String> = (0..12).map(|i| format!("tsk_{i:04}")).collect();
    for (i, id) in ids.iter().enumerate() {
        let (owner, route) = match i % 3 {
            0 => ("", "hello"),
            1 => ("bob", "hello"),
            _ => ("", "other"),
        };
        store
            .insert_a2a_task(&NewA2aTask {
                owner,
                route,
                ..new_task(id)
            })
            .await
            .expect("insert");
    }
    assert_eq!(counts().await, 3, "three (route, owner) pairs, submitted");
    for id in &ids[..8] {
        store
            .append_task_event(
                id,
                &crate::tasks::model::EventKind::Status {
                    state: TaskState::Completed,
                    message: None,
                    parts: None,
                },
            )
            .await
            .expect("ended");
    }
    assert_eq!(counts().await, 6, "each pair both submitted and completed");
    let listed = store
        .a2a_tasks(&TaskFilter {
            route: Some("hello"),
            owner: Some(""),
            state: Some(TaskState::Completed),
            limit: 1,
            ..Default::default()
        })
        .await
        .expect("list")
        .1;
    assert_eq!(listed, 3, "tsk_0000, 0003, 0006");
    // Eight ended: keeping 8 or more names none; keeping 2, the sixth oldest.
    assert_eq!(store.newest_beyond(8).await.expect("bound"), None);
    assert_eq!(store.newest_beyond(80).await.expect("bound"), None);
    let sixth = store.newest_beyond(2).await.expect("bound").expect("one");
    let pruned = store.prune_a2a_tasks(None, Some(2)).await.expect("pruned");
    assert_eq!(pruned, 6);
    counts().await;
    let left: Vec<(String, String)> = sqlx::query_as(&format!(
        "SELECT ended_at, id FROM tasks WHERE {} ORDER BY ended_at, id",
        super::writes::ENDED
    ))
    .fetch_all(&pool)
    .await
    .expect("left");
    assert_eq!(left.len(), 2);
    assert!(
        left.iter().all(|kept| *kept > sixth),
        "{left:?} after {sixth:?}"
    );
}
