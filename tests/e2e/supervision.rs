//! Restart policies: on-failure with backoff and a give-up limit, always, and no.

use roost_ctl::api::{RestartPolicy, SessionState};

use crate::harness::{Daemon, TEST_CONFIG, capsule};

pub(crate) const FAST_RESTARTS: &str = "restart: {initial_backoff_ms: 10, multiplier: 1.5, max_backoff_secs: 1, reset_after_secs: 30, max_restarts: 3}\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_failure_restarts_with_backoff_then_gives_up_with_a_reason() {
    let d = Daemon::start_with(&format!("{TEST_CONFIG}{FAST_RESTARTS}"), &[]).await;
    let cap = capsule(d.root.path(), "panic", "panic", "");
    let s = d.start_supervised(&cap, RestartPolicy::OnFailure).await;
    let end = d.client.wait(&s.id).await.expect("wait");
    assert_eq!(end.state, SessionState::Failed);
    assert_eq!(end.restart_count, 3);
    let error = end.error.expect("reason");
    assert!(
        error.starts_with("gave up after 3 consecutive restarts"),
        "{error}"
    );
    assert!(
        error.contains("capsule exploded on purpose"),
        "last error kept: {error}"
    );
    let (status, body) = d
        .client
        .raw(
            hyper::Method::GET,
            &format!("/v1/sessions/{}/events", s.id),
            None,
        )
        .await
        .expect("events");
    assert!(status.is_success());
    let events: Vec<serde_json::Value> = serde_json::from_slice(&body).expect("json");
    let states: Vec<&str> = events.iter().filter_map(|e| e["state"].as_str()).collect();
    assert_eq!(
        states,
        [
            "running", "starting", "running", "starting", "running", "starting", "running",
            "failed"
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_failure_does_not_restart_a_completed_capsule() {
    let d = Daemon::start_with(&format!("{TEST_CONFIG}{FAST_RESTARTS}"), &[]).await;
    let cap = capsule(d.root.path(), "hello", "hello", "");
    let s = d.start_supervised(&cap, RestartPolicy::OnFailure).await;
    let end = d.client.wait(&s.id).await.expect("wait");
    assert_eq!(end.state, SessionState::Completed);
    assert_eq!(end.restart_count, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn always_restarts_completed_capsules_until_stopped() {
    let d = Daemon::start_with(&format!("{TEST_CONFIG}{FAST_RESTARTS}"), &[]).await;
    let cap = capsule(d.root.path(), "hello", "hello", "");
    let s = d.start_supervised(&cap, RestartPolicy::Always).await;
    let end = d.client.wait(&s.id).await.expect("wait");
    // Three restarts, then the give-up limit ends it.
    assert_eq!(end.restart_count, 3);
    assert_eq!(end.state, SessionState::Failed);
    assert!(
        end.error
            .as_deref()
            .unwrap_or("")
            .contains("last run: completed"),
        "{end:?}"
    );
}
