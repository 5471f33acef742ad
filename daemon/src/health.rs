//! Liveness and readiness as `/healthz` and `/readyz` report them (the
//! metrics listener and the A2A gateway render them): ready when the store
//! takes a write and the A2A gateway accepts connections. `/readyz` needs no
//! token, so its answer is kept for [`KEEP`]: however often it is asked,
//! roostd probes at most once per second.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::store::Store;

/// How long one check may take before it counts as failed.
const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a readiness answer is kept.
pub const KEEP: Duration = Duration::from_secs(1);

#[derive(Clone)]
pub struct Health {
    store: Store,
    gateway: SocketAddr,
    /// The last answer and when it was made; callers meanwhile wait on the
    /// one probe in flight rather than start their own.
    last: Arc<tokio::sync::Mutex<Option<(Instant, Report)>>>,
    probes: Arc<AtomicU64>,
}

/// The checks' outcome.
#[derive(Clone)]
pub struct Report {
    pub ready: bool,
    pub body: Value,
}

impl Health {
    pub fn new(store: Store, gateway: SocketAddr) -> Self {
        Self {
            store,
            gateway,
            last: Arc::default(),
            probes: Arc::default(),
        }
    }

    /// Each check, with why it failed: the last answer if it is younger
    /// than [`KEEP`], else a new probe.
    pub async fn ready(&self) -> Report {
        let mut last = self.last.lock().await;
        if let Some((at, report)) = &*last
            && at.elapsed() < KEEP
        {
            return report.clone();
        }
        let report = self.probe().await;
        *last = Some((Instant::now(), report.clone()));
        report
    }

    /// How many probes have run.
    pub fn probes(&self) -> u64 {
        self.probes.load(Ordering::Relaxed)
    }

    async fn probe(&self) -> Report {
        self.probes.fetch_add(1, Ordering::Relaxed);
        let store = match tokio::time::timeout(CHECK_TIMEOUT, self.store.writable()).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(error)) => Err(format!("the store takes no writes: {error}")),
            Err(_) => Err("the store did not answer a write within 2 s".to_string()),
        };
        let gateway =
            match tokio::time::timeout(CHECK_TIMEOUT, tokio::net::TcpStream::connect(self.gateway))
                .await
            {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(error)) => Err(format!(
                    "the A2A gateway on {} refuses: {error}",
                    self.gateway
                )),
                Err(_) => Err(format!(
                    "the A2A gateway on {} did not accept within 2 s",
                    self.gateway
                )),
            };
        let ready = store.is_ok() && gateway.is_ok();
        let show = |r: &Result<(), String>| match r {
            Ok(()) => json!({"ok": true}),
            Err(e) => json!({"ok": false, "error": e}),
        };
        Report {
            ready,
            body: json!({
                "status": if ready { "ready" } else { "not ready" },
                "checks": {"store": show(&store), "gateway": show(&gateway)},
            }),
        }
    }
}

/// `/healthz`: the process answers.
pub fn live() -> Value {
    json!({"status": "live", "version": env!("CARGO_PKG_VERSION")})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn not_ready_names_what_failed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(
            &dir.path().join("roost.db"),
            crate::store::Durability::Normal,
        )
        .await
        .expect("store");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let open = listener.local_addr().expect("addr");
        // The control: a gateway that accepts, a store that takes writes.
        let report = Health::new(store.clone(), open).ready().await;
        assert!(report.ready, "{}", report.body);
        drop(listener);
        let report = Health::new(store.clone(), open).ready().await;
        assert!(!report.ready);
        assert_eq!(report.body["checks"]["store"]["ok"], true);
        assert_eq!(report.body["checks"]["gateway"]["ok"], false);
        assert!(
            report.body["checks"]["gateway"]["error"]
                .as_str()
                .is_some_and(|e| e.contains("refuses")),
            "{}",
            report.body
        );
    }

    #[tokio::test]
    async fn many_readiness_asks_cost_one_probe_per_second() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(
            &dir.path().join("roost.db"),
            crate::store::Durability::Normal,
        )
        .await
        .expect("store");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let health = Health::new(store, listener.local_addr().expect("addr"));
        let asks = (0..200).map(|_| health.ready());
        let reports = futures::future::join_all(asks).await;
        assert!(reports.iter().all(|r| r.ready));
        assert_eq!(health.probes(), 1, "200 asks at once, one probe");
        // The control: once the answer is older than KEEP, it is probed again.
        tokio::time::sleep(KEEP + Duration::from_millis(50)).await;
        assert!(health.ready().await.ready);
        assert_eq!(health.probes(), 2);
    }
}
