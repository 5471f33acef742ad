//! Retention: ended tasks are deleted per `a2a.retention`.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::Broker;

impl Broker {
    /// Deletes ended tasks per `retention` every `interval_secs` until `stop`.
    pub async fn prune_loop(
        self: Arc<Self>,
        retention: crate::config::RetentionConfig,
        stop: CancellationToken,
    ) {
        let every = std::time::Duration::from_secs(retention.interval_secs.max(1));
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(every) => {}
            }
            let before = (retention.max_age_secs > 0).then(|| {
                let at = std::time::SystemTime::now()
                    - std::time::Duration::from_secs(retention.max_age_secs);
                humantime::format_rfc3339_millis(at).to_string()
            });
            let keep = (retention.max_tasks > 0).then_some(retention.max_tasks);
            match self.store.prune_a2a_tasks(before.as_deref(), keep).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(tasks = n, "ended A2A tasks pruned (a2a.retention)"),
                Err(error) => tracing::warn!(%error, "cannot prune ended A2A tasks"),
            }
        }
    }
}
