//! Routes moving between nodes: a node whose heartbeat expired (its entry
//! left the node registry) leaves its live routes behind; a surviving node
//! takes each one that restarts (`restart: always`, `on-failure`) by
//! compare-and-set on its record (the record's revision is the lease: one
//! node wins), brings the route's tasks in from the journal, and starts its
//! session under the same id and name. Tasks that never started run there
//! (each taken by an entry that expects the task's last one, so the node
//! that left cannot start it too); tasks that were running end `failed`;
//! ended ones stay readable. And the other way: a route this node runs
//! that the table says another node took is given up here.
//!
//! A node cut off from NATS concludes nothing: it takes nothing over and
//! gives nothing up until it reads the cluster again.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer, kv};
use futures::StreamExt;

use super::Cluster;
use super::journal::{self, Accepted, Entry, Journal};
use super::routes::RouteRecord;
use crate::a2a::routing::Adopt;
use crate::ids::{SessionId, TaskId};
use crate::tasks::log::Inserted;
use crate::tasks::model::{EventKind, TaskState};

/// How often a node looks for routes to take or give up.
const EVERY: Duration = Duration::from_millis(500);
/// A node that is not the first choice for a route waits this long before
/// taking it (so routes spread over the nodes that are left).
const SECOND_CHOICE_AFTER: Duration = Duration::from_secs(3);

/// What moves sessions on this node, set once the supervisor runs.
pub(super) struct Movers {
    pub adopt: Arc<dyn Adopt>,
    pub journal: Arc<Journal>,
}

/// Looks for routes to take over, take in or give up, until roostd stops.
pub(super) async fn watch(cluster: Arc<Cluster>) {
    let mut dead_since: BTreeMap<String, Instant> = BTreeMap::new();
    loop {
        tokio::select! {
            () = cluster.stop.cancelled() => return,
            () = tokio::time::sleep(EVERY) => {}
        }
        let (Some(joined), Some(movers)) = (cluster.joined.get(), cluster.movers.get()) else {
            continue;
        };
        if joined.client.connection_state() != async_nats::connection::State::Connected {
            continue;
        }
        let Ok(nodes) = cluster.nodes().await else {
            continue;
        };
        give_up(&cluster, movers).await;
        if cluster.draining.load(std::sync::atomic::Ordering::Relaxed) {
            continue;
        }
        let live: HashSet<&str> = nodes.iter().map(|n| n.node.as_str()).collect();
        let records = joined.routes.all();
        // Routes a drained node handed to this one.
        for record in records.iter().filter(|r| {
            r.live
                && r.node == cluster.node
                && r.moving_from.is_some()
                && !cluster.mine.has(&r.route)
        }) {
            take_in(&cluster, movers, record.clone()).await;
        }
        let orphans: Vec<&RouteRecord> = records
            .iter()
            .filter(|r| r.live && r.node != cluster.node && !live.contains(r.node.as_str()))
            .filter(|r| {
                r.start
                    .as_ref()
                    .is_some_and(|s| s.restart != roost_wire::api::RestartPolicy::No)
            })
            .collect();
        dead_since.retain(|route, _| orphans.iter().any(|r| &r.route == route));
        // Routes spread over the nodes that may take them.
        let takers: Vec<&str> = nodes
            .iter()
            .filter(|n| !n.draining)
            .map(|n| n.node.as_str())
            .collect();
        for record in orphans {
            let first = *dead_since
                .entry(record.route.clone())
                .or_insert_with(Instant::now);
            let preferred = takers
                .get(spread(&record.route) % takers.len().max(1))
                .is_some_and(|n| *n == cluster.node);
            if !preferred && first.elapsed() < SECOND_CHOICE_AFTER {
                continue;
            }
            take_over(&cluster, movers, record.clone()).await;
        }
    }
}

/// Which of the live nodes a route prefers (a stable hash of its name).
fn spread(route: &str) -> usize {
    route.bytes().fold(2166136261u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(16777619)
    }) as usize
}

/// Stops this node's sessions whose route another node holds now (it took
/// them over while this node was cut off, or thought dead).
async fn give_up(cluster: &Cluster, movers: &Movers) {
    let Some(joined) = cluster.joined.get() else {
        return;
    };
    for mine in cluster.mine.all() {
        if let Some(node) = joined.routes.live_holder(&mine.route)
            && node != cluster.node
        {
            cluster.mine.remove(&mine.route, &mine.session_id);
            movers
                .adopt
                .give_up(
                    SessionId::from(mine.session_id.as_str()),
                    format!("node {node} took route '{}' over", mine.route),
                )
                .await;
        }
    }
}

/// Takes `record`'s route from its node, which left: the record names
/// this node (compare-and-set at the revision read, so one node wins), its
/// tasks come in from the journal, and its session starts here.
async fn take_over(cluster: &Arc<Cluster>, movers: &Movers, record: RouteRecord) {
    let Some(joined) = cluster.joined.get() else {
        return;
    };
    let Some(start) = record.start.clone() else {
        return;
    };
    let Ok(Some(entry)) = joined.routes.bucket().entry(record.route.as_str()).await else {
        return;
    };
    let Ok(held) = serde_json::from_slice::<RouteRecord>(&entry.value) else {
        return;
    };
    if entry.operation != kv::Operation::Put
        || !held.live
        || held.node != record.node
        || held.session_id != record.session_id
    {
        return;
    }
    let began = Instant::now();
    let mut taken = held.clone();
    taken.node = cluster.node.clone();
    if joined
        .routes
        .bucket()
        .update(
            record.route.as_str(),
            serde_json::to_vec(&taken).unwrap_or_default().into(),
            entry.revision,
        )
        .await
        .is_err()
    {
        return; // another node took it first
    }
    tracing::warn!(route = %record.route, session_id = %record.session_id, from = %record.node,
        "a node left the cluster: taking its route over");
    // Its tasks come in once its session's row exists here, before the
    // session takes any.
    let arriving = arrive(cluster, movers, &joined.js, held, began);
    start_here(cluster, movers, &record, start, arriving).await;
}

/// Starts `record`'s session here (its record names this node); one that
/// cannot start here has its route marked ended.
async fn start_here(
    cluster: &Cluster,
    movers: &Movers,
    record: &RouteRecord,
    start: roost_wire::api::StartRequest,
    arriving: futures::future::BoxFuture<'static, ()>,
) {
    let id = SessionId::from(record.session_id.as_str());
    if let Err(error) = movers
        .adopt
        .adopt(id, record.route.clone(), start, arriving)
        .await
    {
        tracing::error!(route = %record.route, session_id = %record.session_id, %error,
            "cannot start a route's session here; it is marked ended");
        if let Some(joined) = cluster.joined.get() {
            joined
                .routes
                .release(&record.route, &record.session_id, &cluster.node)
                .await;
        }
    }
}

/// Starts a route a drained node handed to this one (its record names
/// this node already): its tasks come in from the journal first.
async fn take_in(cluster: &Arc<Cluster>, movers: &Movers, record: RouteRecord) {
    let Some(joined) = cluster.joined.get() else {
        return;
    };
    let Some(start) = record.start.clone() else {
        return;
    };
    let began = Instant::now();
    tracing::warn!(route = %record.route, session_id = %record.session_id,
        from = record.moving_from.as_deref().unwrap_or(""), "a drained node hands its route here");
    let arriving = arrive(cluster, movers, &joined.js, record.clone(), began);
    start_here(cluster, movers, &record, start, arriving).await;
}

/// What brings a route's tasks in, once its session's row exists here.
fn arrive(
    cluster: &Arc<Cluster>,
    movers: &Movers,
    js: &jetstream::Context,
    held: RouteRecord,
    began: Instant,
) -> futures::future::BoxFuture<'static, ()> {
    let cluster = Arc::clone(cluster);
    let journal = Arc::clone(&movers.journal);
    let js = js.clone();
    Box::pin(async move {
        match bring_tasks(&cluster, &journal, &js, &held).await {
            Ok((brought, run, failed)) => tracing::warn!(route = %held.route,
                session_id = %held.session_id, from = held.moving_from.as_deref().unwrap_or(&held.node),
                tasks = brought, to_run = run,
                failed, ms = began.elapsed().as_millis() as u64, "took a route over with its tasks"),
            Err(error) => tracing::error!(route = %held.route, %error,
                "cannot read the route's tasks from the journal; its session starts without them"),
        }
    })
}

/// One task as the journal has it.
struct Journaled {
    task: Accepted,
    started: bool,
    ended: bool,
    events: Vec<EventKind>,
    last: u64,
}

/// Reads every entry of `record`'s route from the journal and stores its
/// tasks here: how many, how many will run, how many were failed.
async fn bring_tasks(
    cluster: &Cluster,
    journal: &Arc<Journal>,
    js: &jetstream::Context,
    record: &RouteRecord,
) -> Result<(usize, usize, usize), String> {
    let tasks = read_route(js, &record.route).await?;
    let brought = tasks.len();
    let (mut run, mut failed) = (0, 0);
    for (id, task) in tasks {
        // A task id becomes a row's key here: only one of ours.
        if !is_task_id(&id) {
            continue;
        }
        let id = TaskId::from(id.as_str());
        let local = journal.local();
        if matches!(local.task(&id).await, Ok(Some(_))) {
            continue;
        }
        // A task that never started is this node's to run only if its
        // journal has had nothing since (else the node that left started it).
        let mut started = task.started;
        let mut expect = None;
        if !task.started && !task.ended {
            match journal
                .write(
                    &record.route,
                    &id,
                    Entry::Taken {
                        node: cluster.node.clone(),
                    },
                    Some(task.last),
                )
                .await
            {
                Ok(seq) => expect = Some(seq),
                Err(_) => started = true,
            }
        }
        // Every task of the route is kept under the session that runs it
        // now (older sessions of the route have no row on this node).
        if let Err(error) = store(local.as_ref(), &id, &record.session_id, &task, started).await {
            tracing::error!(task_id = %id, route = %record.route, error, "cannot store a task taken over");
            continue;
        }
        match expect {
            Some(seq) => {
                journal.taken(id, record.route.clone(), seq);
                run += 1;
            }
            None if !task.ended => {
                failed += 1;
                let why = format!(
                    "node {}, which ran this task, left the cluster while it ran (its heartbeat \
                     expired); it was not run again",
                    record.node
                );
                let (tx, rx) = tokio::sync::oneshot::channel();
                crate::tasks::log::TaskLog::append_then(
                    journal.as_ref(),
                    &id,
                    vec![EventKind::Status {
                        parts: None,
                        state: TaskState::Failed,
                        message: Some(why),
                    }],
                    true,
                    Box::new(move |r| {
                        let _ = tx.send(r.is_ok());
                    }),
                );
                let _ = rx.await;
            }
            None => {}
        }
    }
    Ok((brought, run, failed))
}

/// Whether `id` is a task id as roostd makes them (`tsk_` and up to 64
/// letters and digits).
fn is_task_id(id: &str) -> bool {
    id.strip_prefix("tsk_").is_some_and(|rest| {
        !rest.is_empty() && rest.len() <= 64 && rest.bytes().all(|b| b.is_ascii_alphanumeric())
    })
}

/// Stores a journaled task in this node's own log, as it was there.
async fn store(
    local: &dyn crate::tasks::log::TaskLog,
    id: &TaskId,
    session_id: &str,
    task: &Journaled,
    started: bool,
) -> Result<(), String> {
    let parts = task.task.parts();
    let (_, insertion) = local.insert(&task.task.as_new(id, session_id, &parts), started, false);
    match insertion.await.map_err(|e| e.to_string())? {
        Inserted::Committed(_) => {}
        Inserted::Withdrawn => return Err("the task store did not take it in time".into()),
        Inserted::Unknown(pending) => {
            pending.await.map_err(|e| e.to_string())?;
        }
    }
    // Its events, but the start the record already says.
    let events: Vec<EventKind> = task
        .events
        .iter()
        .filter(|k| {
            !matches!(
                k,
                EventKind::Status {
                    state: TaskState::Working,
                    message: None,
                    ..
                }
            )
        })
        .cloned()
        .collect();
    if events.is_empty() {
        return Ok(());
    }
    let (tx, rx) = tokio::sync::oneshot::channel();
    local.append_then(
        id,
        events,
        false,
        Box::new(move |r| {
            let _ = tx.send(r.map(drop).map_err(|e| e.to_string()));
        }),
    );
    rx.await.map_err(|_| "the task store stopped".to_string())?
}

/// Every task of `route` in the journal, by id in the order accepted.
async fn read_route(
    js: &jetstream::Context,
    route: &str,
) -> Result<Vec<(String, Journaled)>, String> {
    let stream = js
        .get_stream_no_info(journal::STREAM)
        .await
        .map_err(|e| e.to_string())?;
    let consumer: consumer::PullConsumer = stream
        .create_consumer(consumer::pull::Config {
            filter_subject: journal::subject(route, ">"),
            deliver_policy: consumer::DeliverPolicy::All,
            ack_policy: consumer::AckPolicy::None,
            inactive_threshold: Duration::from_secs(60),
            ..Default::default()
        })
        .await
        .map_err(|e| e.to_string())?;
    let mut fold = Fold::default();
    loop {
        let mut batch = consumer
            .fetch()
            .max_messages(1000)
            .messages()
            .await
            .map_err(|e| e.to_string())?;
        let mut got = 0;
        while let Some(message) = batch.next().await {
            let message = message.map_err(|e| e.to_string())?;
            got += 1;
            let seq = message.info().map(|i| i.stream_sequence).unwrap_or(0);
            let task_id = message.subject.as_str().rsplit('.').next().unwrap_or("");
            if let Ok(entry) = serde_json::from_slice::<Entry>(&message.payload) {
                fold.add(task_id, seq, entry);
            }
        }
        if got == 0 {
            break;
        }
    }
    let _ = stream.delete_consumer(&consumer_name(&consumer)).await;
    Ok(fold.tasks())
}

/// A route's journal entries, folded into its tasks as they stand.
#[derive(Default)]
struct Fold {
    order: Vec<String>,
    tasks: std::collections::HashMap<String, Journaled>,
}

impl Fold {
    /// Entry `entry` of task `task_id`'s subject, at stream sequence `seq`.
    fn add(&mut self, task_id: &str, seq: u64, entry: Entry) {
        match entry {
            Entry::Accepted { task, working } => {
                if task.id == task_id && !self.tasks.contains_key(task_id) {
                    self.order.push(task_id.to_string());
                    self.tasks.insert(
                        task_id.to_string(),
                        Journaled {
                            task,
                            started: working,
                            ended: false,
                            events: Vec::new(),
                            last: seq,
                        },
                    );
                }
            }
            Entry::Events { kinds } => {
                if let Some(t) = self.tasks.get_mut(task_id) {
                    t.last = seq;
                    for kind in kinds {
                        match &kind {
                            EventKind::Status { state, .. } if state.is_terminal() => {
                                t.ended = true
                            }
                            EventKind::Status { state, .. } if *state != TaskState::Submitted => {
                                t.started = true;
                            }
                            _ => {}
                        }
                        t.events.push(kind);
                    }
                }
            }
            Entry::Taken { .. } => {
                if let Some(t) = self.tasks.get_mut(task_id) {
                    t.last = seq;
                }
            }
        }
    }

    /// The tasks, in the order accepted.
    fn tasks(mut self) -> Vec<(String, Journaled)> {
        self.order
            .into_iter()
            .filter_map(|id| self.tasks.remove(&id).map(|t| (id, t)))
            .collect()
    }
}

fn consumer_name(consumer: &consumer::PullConsumer) -> String {
    consumer.cached_info().name.clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accepted(id: &str) -> Entry {
        Entry::Accepted {
            task: Accepted {
                id: id.into(),
                session_id: "ses_1".into(),
                route: "r".into(),
                owner: String::new(),
                context_id: "ctx".into(),
                message_id: format!("m-{id}"),
                text: "hi".into(),
                message_json: "{}".into(),
                created_at: "now".into(),
            },
            working: false,
        }
    }

    fn status(state: TaskState) -> Entry {
        Entry::Events {
            kinds: vec![EventKind::Status {
                parts: None,
                state,
                message: None,
            }],
        }
    }

    #[test]
    fn a_routes_entries_fold_into_what_each_task_needs_on_another_node() {
        let mut fold = Fold::default();
        fold.add("tsk_a", 1, accepted("tsk_a"));
        fold.add("tsk_b", 2, accepted("tsk_b"));
        fold.add("tsk_c", 3, accepted("tsk_c"));
        fold.add("tsk_a", 4, status(TaskState::Working));
        fold.add("tsk_b", 5, status(TaskState::Working));
        fold.add("tsk_b", 6, status(TaskState::Completed));
        fold.add("tsk_c", 7, Entry::Taken { node: "b".into() });
        // An entry for a task whose acceptance is not there, or whose id
        // does not match its subject, is not a task.
        fold.add("tsk_x", 8, status(TaskState::Working));
        fold.add("tsk_y", 9, accepted("tsk_z"));
        let tasks = fold.tasks();
        let ids: Vec<&str> = tasks.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(ids, ["tsk_a", "tsk_b", "tsk_c"]);
        let (a, b, c) = (&tasks[0].1, &tasks[1].1, &tasks[2].1);
        // Running when its node left: started, not ended (fails there).
        assert!(a.started && !a.ended && a.last == 4);
        // Ended: brought over as it ended.
        assert!(b.started && b.ended && b.events.len() == 2);
        // Taken by another node that never started it: its next start
        // must expect the `taken` entry.
        assert!(!c.started && !c.ended && c.last == 7);
    }

    #[test]
    fn only_task_ids_are_stored() {
        assert!(is_task_id("tsk_01a23c31f7ea744b8eb475411013e2de"));
        for bad in [
            "tsk_",
            "ses_1",
            "tsk_a b",
            "tsk_../x",
            &format!("tsk_{}", "a".repeat(65)),
        ] {
            assert!(!is_task_id(bad), "{bad}");
        }
    }

    #[test]
    fn journal_entries_read_back_as_written() {
        for entry in [
            accepted("tsk_a"),
            status(TaskState::Working),
            Entry::Taken { node: "b".into() },
        ] {
            let bytes = serde_json::to_vec(&entry).expect("json");
            assert_eq!(
                serde_json::from_slice::<Entry>(&bytes).expect("entry"),
                entry
            );
        }
    }
}
