//! Routing on one host: the gateway's [`Routing`] port answered from the
//! supervisor's route table (live sessions, in memory) and the store
//! (sessions that have ended, and each session's card spec beside it).

use std::path::Path;

use super::Supervisor;
use crate::a2a::routing::{Agent, Route, Routing};
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
