//! Unit tests of the broker's inbox accounting.

use super::*;
use crate::store::{NewSession, Store};
use roost_wire::api::StartRequest;

/// A broker on a fresh store with one session, and the store (the tests
/// stall its writer).
async fn broker_with_session(dir: &std::path::Path) -> (Arc<Broker>, Store) {
    let store = Store::open(&dir.join("roost.db"), crate::store::Durability::Normal)
        .await
        .expect("store");
    store
        .insert_session(&NewSession {
            id: "ses_q",
            name: "q",
            capsule: "q",
            version: "0.1.0",
            manifest: "/caps/q/murmur.yaml",
            workdir: "/w",
            bookkeeping_dir: "/b",
            request: &StartRequest::default(),
            artifacts: &[],
            sandbox: "",
        })
        .await
        .expect("session");
    let broker = Arc::new(Broker::new(Arc::new(store.clone()), Arc::default()));
    (broker, store)
}

fn task(message_id: &str) -> NewTask<'_> {
    NewTask {
        session_id: "ses_q",
        route: "q",
        owner: "",
        message_id,
        context_id: None,
        text: "hi",
        message_json: "{}",
        parts: &[],
        traceparent: None,
        dedupe: true,
        tick: None,
    }
}

#[tokio::test]
async fn a_task_canceled_while_it_waits_frees_its_slot_at_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (broker, _store) = broker_with_session(dir.path()).await;
    let mut inbox = broker.open_inbox("ses_q", "q", 1, Default::default());
    let (first, _) = broker.submit(task("m1")).await.expect("first accepted");
    // The depth is 1: a second waiting task is refused ...
    let refused = broker.submit(task("m2")).await;
    assert!(
        matches!(refused, Err(SubmitError::QueueFull { depth: 1, .. })),
        "the control: the slot is taken"
    );
    // ... until the waiting one is canceled, though the session has not
    // passed over it yet (it is still in the channel).
    broker.cancel(&first.id).await.expect("cancel");
    let (second, _) = broker
        .submit(task("m3"))
        .await
        .expect("accepted once the canceled task gave its slot back");
    // The session receives both in order; the canceled one is skipped by
    // its run (its token says canceled), the other counts no more once taken.
    assert_eq!(inbox.recv().await.expect("first").task_id, first.id);
    assert_eq!(inbox.recv().await.expect("second").task_id, second.id);
    broker.submit(task("m4")).await.expect("a slot again");
}

/// The writer made slow on purpose: a task it has not taken by the deadline
/// is withdrawn (the client hears so, and nothing of it is ever written or
/// run); one it took but had not finished by a second deadline is
/// "unknown" with its id, and is handed to the session once it commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_gives_up_never_has_its_task_run_behind_its_back() {
    use std::time::Duration;
    let dir = tempfile::tempdir().expect("tempdir");
    let (broker, store) = broker_with_session(dir.path()).await;
    let mut inbox = broker.open_inbox("ses_q", "q", 8, Default::default());
    store.set_write_deadline(Duration::from_millis(300));

    // The control: a writer that keeps up accepts and hands on.
    let (ok, _) = broker.submit(task("fine")).await.expect("accepted");
    assert_eq!(inbox.recv().await.expect("handed on").task_id, ok.id);

    // Held for 1.5 s before it reaches the task: withdrawn at 0.3 s.
    store.stall_writer(Duration::from_millis(1500));
    tokio::time::sleep(Duration::from_millis(50)).await;
    let refused = broker.submit(task("slow-1")).await;
    assert!(
        matches!(refused, Err(SubmitError::Withdrawn { .. })),
        "{:?}",
        refused.err()
    );
    tokio::time::sleep(Duration::from_millis(1600)).await;
    assert!(
        store
            .a2a_task_by_message(("q", ""), "slow-1")
            .await
            .expect("read")
            .is_none(),
        "nothing of a withdrawn task was written"
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(200), inbox.recv())
            .await
            .is_err(),
        "nothing was handed to the session"
    );

    // Taken with a stalled job in the same commit (the writer is busy for
    // 0.2 s while both are queued): its answer comes after the stall
    // (1.5 s), past both deadlines (0.6 s): unknown, then run.
    store.stall_writer(Duration::from_millis(200));
    tokio::time::sleep(Duration::from_millis(50)).await;
    store.stall_writer(Duration::from_millis(1500));
    let unknown = broker.submit(task("slow-2")).await;
    let Err(SubmitError::Unknown { task_id, .. }) = unknown else {
        panic!("expected unknown: {:?}", unknown.err());
    };
    let handed = tokio::time::timeout(Duration::from_secs(5), inbox.recv())
        .await
        .expect("handed on once committed")
        .expect("a task");
    assert_eq!(handed.task_id, task_id, "the task the client was told of");
    let stored = store.a2a_task_by_message(("q", ""), "slow-2").await;
    assert_eq!(stored.expect("read").expect("findable").id, task_id);
}

/// A streamed update the store fails to record leaves a hole in the task's
/// log: the task ends failed, saying so, not completed. The control: the
/// same run whose updates are all stored completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_whose_streamed_updates_were_not_all_stored_does_not_complete() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (broker, _store) = broker_with_session(dir.path()).await;
    let mut inbox = broker.open_inbox("ses_q", "q", 8, Default::default());
    Store::fail_events_containing(&dir.path().join("roost.db"), "lost-chunk");
    let mut ends = Vec::new();
    for (message, chunk) in [("kept", "kept-chunk"), ("lost", "lost-chunk")] {
        let (task, _) = broker.submit(task(message)).await.expect("accepted");
        let incoming = *inbox.recv().await.expect("handed on");
        let chunk = chunk.to_string();
        let outcome = broker
            .serve(incoming, None, None, |link, _| async move {
                link.chunk(&chunk, false).await;
                Outcome::Completed("the answer".into())
            })
            .await
            .expect("ran");
        let stored = broker.task(&task.id).await.expect("read").expect("task");
        ends.push((message, stored.state, outcome));
    }
    assert_eq!(
        ends[0].1,
        TaskState::Completed,
        "the control: {:?}",
        ends[0]
    );
    assert_eq!(ends[1].1, TaskState::Failed, "{:?}", ends[1]);
    let Outcome::Failed(why) = &ends[1].2 else {
        panic!("the session hears it failed: {:?}", ends[1]);
    };
    assert!(why.contains("could not be stored"), "{why}");
}

/// A hibernating session's inbox: a task that arrives while its launch is
/// still ending asks no wake until the inbox is parked, then exactly one;
/// a second task while that wake is under way asks none; the launch that
/// takes the parked inbox gets both, the first marked with the wake.
#[tokio::test]
async fn a_parked_inbox_asks_one_wake_and_the_next_launch_gets_what_waits() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (broker, _store) = broker_with_session(dir.path()).await;
    let (waker, mut wakes) = mpsc::unbounded_channel();
    broker.set_waker(waker);
    let inbox = broker.open_inbox("ses_q", "q", 4, Default::default());
    assert!(broker.begin_hibernation("ses_q"));
    let (first, _) = broker.submit(task("m1")).await.expect("accepted");
    assert!(wakes.try_recv().is_err(), "nothing parked yet: no wake");
    let ending = Queue::open(&broker, "ses_q", Some(inbox)).await;
    ending.release(&broker, "ses_q", false).await;
    assert_eq!(wakes.try_recv().expect("woken as it parks"), "ses_q");
    let (second, _) = broker.submit(task("m2")).await.expect("accepted");
    assert!(wakes.try_recv().is_err(), "one wake at a time");
    assert!(broker.hibernating("ses_q"));

    let parked = broker.open_inbox("ses_q", "q", 4, Default::default());
    assert!(!broker.hibernating("ses_q"), "taken: awake again");
    let mut next = Queue::open(&broker, "ses_q", Some(parked)).await;
    let stop = CancellationToken::new();
    let mut got = Vec::new();
    for _ in 0..2 {
        match next
            .next(Some(std::time::Duration::from_secs(5)), &stop)
            .await
        {
            Next::Task(task) => got.push((task.task_id, task.woke.is_some())),
            _ => panic!("a task waits"),
        }
    }
    assert_eq!(got, [(first.id, true), (second.id, false)]);
}

/// A launch that waited on its inbox and then hibernated leaves no waker in
/// the parked inbox: the channel would otherwise keep the ended launch's
/// task (its whole future's memory) allocated while the session sleeps.
#[tokio::test]
async fn a_parked_inbox_keeps_no_waker_of_the_launch_that_ended() {
    struct Count;
    impl std::task::Wake for Count {
        fn wake(self: Arc<Self>) {}
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let (broker, _store) = broker_with_session(dir.path()).await;
    let inbox = broker.open_inbox("ses_q", "q", 4, Default::default());
    let mut queue = Queue::open(&broker, "ses_q", Some(inbox)).await;
    let launch = Arc::new(Count);
    let waker = std::task::Waker::from(Arc::clone(&launch));
    let stop = CancellationToken::new();
    {
        let next = std::pin::pin!(queue.next(None, &stop));
        let polled = next.poll(&mut std::task::Context::from_waker(&waker));
        assert!(polled.is_pending(), "no task yet");
    }
    drop(waker);
    // The control: the channel holds the launch's waker after its wait ended.
    assert_eq!(Arc::strong_count(&launch), 2, "the channel keeps the waker");
    assert!(broker.begin_hibernation("ses_q"));
    queue.release(&broker, "ses_q", false).await;
    assert!(broker.hibernating("ses_q"));
    assert_eq!(Arc::strong_count(&launch), 1, "parked without the waker");
}
