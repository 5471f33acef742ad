//! Routing on one host: the gateway's [`Routing`] port answered from the
//! supervisor's route table (live sessions, in memory) and the store
//! (sessions that have ended, and each session's card spec beside it); and
//! [`Adopt`], sessions a cluster moves to this node or away from it.

use std::path::Path;

use super::Supervisor;
use crate::a2a::routing::{Adopt, Agent, Route, Routing};
use crate::ids::SessionId;
use crate::manifest::CardSpec;

#[async_trait::async_trait]
impl Routing for Supervisor {
    async fn route(&self, name: &str) -> Option<Route> {
        if let Some(live) = self.shared.routes.get(name) {
            return Some(live);
        }
        // A route whose last session has ended: its tasks stay readable.
        match self.shared.store.get(name).await {
            Ok(Some(session)) if session.name == name => Some(Route {
                id: session.id.into(),
                name: session.name,
                live: false,
                node: None,
            }),
            _ => None,
        }
    }

    async fn agent(&self, name: &str) -> Option<Agent> {
        let session = self.get(name).await.ok().filter(|s| s.name == name)?;
        Some(Agent {
            spec: CardSpec::load(Path::new(&session.bookkeeping_dir)),
            since: session.started_at.unwrap_or(session.created_at),
            ended: session.state.is_ended(),
            route: session.name,
            capsule: session.capsule,
            version: session.version,
        })
    }
}

#[async_trait::async_trait]
impl Adopt for Supervisor {
    async fn adopt(
        &self,
        id: SessionId,
        name: String,
        request: roost_wire::api::StartRequest,
        arriving: futures::future::BoxFuture<'static, ()>,
    ) -> Result<(), String> {
        self.take_over(id, name, request, arriving)
            .await
            .map(drop)
            .map_err(|e| e.to_string())
    }

    async fn drain(&self, id: SessionId, within: std::time::Duration) -> Result<(), String> {
        Supervisor::drain(self, &id, within)
            .await
            .map(drop)
            .map_err(|e| e.to_string())
    }

    async fn give_up(&self, id: SessionId, why: String) {
        tracing::warn!(session_id = %id, why, "stopping a session another node runs now");
        if let Err(error) = self.stop(&id).await {
            tracing::warn!(session_id = %id, %error, "cannot stop a session another node runs now");
        }
    }
}
