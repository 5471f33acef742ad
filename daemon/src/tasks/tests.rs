//! Unit tests of the broker's inbox accounting.

use super::*;
use crate::store::NewSession;
use roost_ctl::api::StartRequest;

async fn broker_with_session(dir: &std::path::Path) -> Arc<Broker> {
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
    Arc::new(Broker::new(store, Arc::default()))
}

fn task(message_id: &str) -> NewTask<'_> {
    NewTask {
        session_id: "ses_q",
        route: "q",
        message_id,
        context_id: None,
        text: "hi",
        message_json: "{}",
        traceparent: None,
        dedupe: true,
    }
}

#[tokio::test]
async fn a_task_canceled_while_it_waits_frees_its_slot_at_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = broker_with_session(dir.path()).await;
    let mut inbox = broker.open_inbox("ses_q", "q", 1);
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
