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

/// A store in a temp dir (kept while the `TempDir` lives).
async fn store(durability: Durability) -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(&dir.path().join("roost.db"), durability)
        .await
        .expect("open");
    (dir, store)
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
    let (_dir, store) = store(Durability::Normal).await;
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

/// With `store.sync: full`, on a current-thread runtime (whose one thread
/// runs every task: nothing would serve its connections while it waited
/// for the disk), a write whose commit is synced goes to the writer's
/// thread; the control: a write that needs no sync, from the same caller on
/// the same store, is committed by the caller.
#[tokio::test]
async fn a_synced_commit_goes_to_the_writers_thread_from_a_runtimes_only_thread() {
    let (_dir, store) = store(Durability::Full).await;
    always_on_the_thread(&store, durable, "durable").await;
    let by_caller = probes_by_caller(&store).await;
    assert!(
        by_caller > 0,
        "no unsynced commit was made by its caller in 100 tries"
    );
}

/// Makes the write `ops` gives 20 times, each alone: every one is
/// committed on the writer's thread.
async fn always_on_the_thread(store: &Store, ops: fn() -> Vec<WriteOp>, job: &'static str) {
    for _ in 0..20 {
        let seen = Seen::default();
        store.tasks.write_then(ops(), noting(&seen, job), true);
        assert_eq!(when(&seen, 1).await, [(job, "roost-store".to_string())]);
    }
}

/// How many of 100 writes that need no sync, each alone, the calling
/// thread committed itself.
async fn probes_by_caller(store: &Store) -> usize {
    let me = std::thread::current().name().unwrap_or("").to_string();
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
    by_caller
}

/// How many times a task that ticks every millisecond ticked while `work`
/// ran in a task of its own.
async fn ticks_while(work: impl Future<Output = ()> + Send + 'static) -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let ticks = Arc::new(AtomicUsize::new(0));
    let ticker = tokio::spawn({
        let ticks = Arc::clone(&ticks);
        async move {
            loop {
                ticks.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    let before = ticks.load(Ordering::Relaxed);
    tokio::spawn(work).await.expect("work");
    let during = ticks.load(Ordering::Relaxed) - before;
    ticker.abort();
    during
}

/// Where a synced write that holds its commit for 300 ms (a slow disk) is
/// committed when a task on `store`'s runtime makes it, and how often
/// another task of that runtime ticked meanwhile.
async fn stalled_commit(store: &Store) -> (String, String, usize) {
    let seen = Seen::default();
    let caller = Arc::new(Mutex::new(String::new()));
    let during = ticks_while({
        let (store, seen, caller) = (store.clone(), Arc::clone(&seen), Arc::clone(&caller));
        async move {
            *caller.lock().expect("caller") =
                std::thread::current().name().unwrap_or("").to_string();
            let stall = vec![WriteOp::Stall(Duration::from_millis(300))];
            store.tasks.write_then(stall, noting(&seen, "stall"), true);
            when(&seen, 1).await;
        }
    })
    .await;
    let all = seen.lock().expect("seen").clone();
    let caller = caller.lock().expect("caller").clone();
    (
        caller,
        all.first().map(|(_, t)| t.clone()).unwrap_or_default(),
        during,
    )
}

/// With `store.sync: full` and a runtime of two workers, an idle writer
/// lets a caller make a synced commit on its own worker (no hop to the
/// thread and back), and the runtime's other tasks go on, on the other
/// worker, while that commit waits for the disk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_synced_commit_on_a_callers_worker_leaves_the_other_worker_serving() {
    let (_dir, store) = store(Durability::Full).await;
    for _ in 0..20 {
        let (caller, committer, during) = stalled_commit(&store).await;
        if committer == caller {
            assert!(
                during >= 30,
                "another task ticked {during} times during a 300 ms synced commit on a worker"
            );
            return;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    panic!("no synced commit was made by its caller in 20 tries");
}

/// With `store.sync: full` and a runtime of one worker, a synced commit
/// goes to the writer's thread, and the runtime's other tasks go on while
/// it waits for the disk. The control: the same wait made on that worker
/// stalls them.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_synced_commit_leaves_a_runtimes_only_worker_serving() {
    let (_dir, store) = store(Durability::Full).await;
    for _ in 0..5 {
        let (_, committer, during) = stalled_commit(&store).await;
        assert_eq!(committer, "roost-store");
        assert!(
            during >= 30,
            "another task ticked {during} times during a 300 ms synced commit"
        );
    }
    let control = ticks_while(async { std::thread::sleep(Duration::from_millis(300)) }).await;
    assert!(
        control <= 2,
        "control: a 300 ms wait on the only worker let another task tick {control} times"
    );
}

/// A batch of retention's deletes that deletes nothing (its bound is
/// before every task).
fn prune() -> Vec<WriteOp> {
    vec![WriteOp::Prune {
        before: ("0".into(), String::new()),
    }]
}

/// Retention's batches are never committed by their caller (a batch holds
/// the connection for milliseconds; a caller's commit is made on a runtime
/// worker): they go to the writer's thread even when it is idle. The
/// control: a write that is not retention's, from the same caller, is
/// committed by the caller.
#[tokio::test]
async fn retentions_batches_go_to_the_writers_thread_even_when_it_is_idle() {
    let (_dir, store) = store(Durability::Normal).await;
    always_on_the_thread(&store, prune, "prune").await;
    let by_caller = probes_by_caller(&store).await;
    assert!(
        by_caller > 0,
        "no commit was made by its caller in 100 tries"
    );
}

/// What the thread takes when retention's batch and a client's write both
/// wait: the client's first, in a group without the batch; the batch next,
/// alone; and the batch first once it has waited `BACKGROUND_WAIT`, so a
/// writer that is never idle still deletes. A caller's commit never takes
/// the batch.
#[test]
fn the_thread_takes_retentions_batch_alone_after_the_writes_clients_wait_for() {
    use super::{BACKGROUND_WAIT, Backlog, Queued};
    use std::time::Instant;
    let job = |ops: Vec<WriteOp>| Queued {
        ops,
        then: Box::new(|_| {}),
        urgent: true,
        ticket: 0,
    };
    let kinds = |group: Vec<(Vec<WriteOp>, Then)>| -> Vec<&'static str> {
        group
            .iter()
            .flat_map(|(ops, _)| ops.iter())
            .map(|op| match op {
                WriteOp::Prune { .. } => "prune",
                WriteOp::Probe => "client",
                _ => "other",
            })
            .collect()
    };
    let mut q = Backlog::default();
    let queue_both = |q: &mut Backlog, since: Instant| {
        q.background.push_back(job(prune()));
        q.background_since = Some(since);
        q.jobs.push_back(job(vec![WriteOp::Probe]));
        q.jobs.push_back(job(vec![WriteOp::Probe]));
        q.count += 2;
        q.urgent = true;
    };
    queue_both(&mut q, Instant::now());
    assert_eq!(kinds(q.take(true)), ["client", "client"]);
    assert_eq!(kinds(q.take(false)), Vec::<&str>::new(), "not a caller's");
    assert_eq!(kinds(q.take(true)), ["prune"]);
    assert!(q.background.is_empty() && q.background_since.is_none());

    // Waited long enough: it goes first, alone, even with clients waiting.
    queue_both(&mut q, Instant::now() - BACKGROUND_WAIT);
    assert_eq!(kinds(q.take(true)), ["prune"]);
    assert_eq!(kinds(q.take(true)), ["client", "client"]);
}
