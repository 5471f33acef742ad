//! Many sessions at once on one Engine, and a spinning guest that must not
//! hold the others up.

use roost_ctl::api::SessionState;

use crate::harness::{Daemon, capsule, request, spinner};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_concurrent_sessions_share_one_compiled_component() {
    let d = Daemon::start().await;
    let cap = capsule(d.root.path(), "hello", "hello", "");
    let spin = spinner(d.root.path());
    // A guest spinning for the whole test must not delay anyone.
    let spinner = d.start_capsule(&spin).await;
    let mut handles = Vec::new();
    for _ in 0..60 {
        let client = d.client.clone();
        let req = request(&cap);
        handles.push(tokio::spawn(async move {
            let s = client.start(&req).await.expect("start");
            client.wait(&s.id).await.expect("wait")
        }));
    }
    let mut ids = std::collections::HashSet::new();
    for handle in handles {
        let s = handle.await.expect("join");
        assert_eq!(s.state, SessionState::Completed, "{s:?}");
        assert!(ids.insert(s.id.clone()), "duplicate id");
        assert!(std::path::Path::new(&s.workdir).join("hello.txt").is_file());
    }
    let spinning = d.client.get(&spinner.id).await.expect("spinner");
    assert_eq!(
        spinning.state,
        SessionState::Running,
        "all 60 finished while the spinner ran"
    );
    assert_eq!(
        d.metric("roost_components_compiled_total").await,
        2,
        "hello and spin, once each"
    );
    assert!(
        d.metric("roost_component_cache_hits_total{tier=\"memory\"}")
            .await
            >= 59
    );
    let stopped = d.client.stop(&spinner.id).await.expect("stop");
    assert_eq!(stopped.state, SessionState::Stopped);
}
