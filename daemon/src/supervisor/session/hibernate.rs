//! A launch that ends hibernated: the session's row says so, with its
//! inbox's shape for a restart (the inbox itself is parked by
//! `Queue::release`), and what its tools were opened to is closed again.

use std::sync::atomic::Ordering;

use roost_wire::api::Session;

use super::SessionTask;

impl SessionTask {
    /// This launch ended idle: the session is recorded `hibernated`, with
    /// its inbox's shape for a restart; what its tools were opened to is
    /// closed again. Its inbox is parked already (`Queue::release`).
    pub(in crate::supervisor) async fn hibernate(&self) -> Option<Session> {
        self.hibernated.store(true, Ordering::Relaxed);
        self.release_grants().await;
        let (depth, same_context) = self.staged.program.lifecycle().map_or((1, "queue"), |l| {
            (l.inbox_depth().unwrap_or(1) as u32, l.same_context.as_str())
        });
        let store = &self.shared.store;
        match store.mark_hibernated(&self.id, depth, same_context).await {
            Ok(true) => tracing::info!("session hibernated"),
            Ok(false) => tracing::warn!("session hibernated, but its row was not running"),
            Err(error) => tracing::error!(%error, "cannot record the session hibernated"),
        }
        store.get(&self.id).await.ok().flatten()
    }
}
