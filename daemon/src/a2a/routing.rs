//! The gateway's port to where routes run, [`Routing`]: a route by name —
//! live, or ended with its tasks still readable — and what its agent card
//! is made from. The gateway knows only this trait; the supervisor
//! implements it for one host (`supervisor/routing.rs`), and a cluster's
//! route table implements it beside.

use crate::ids::SessionId;
use crate::manifest::CardSpec;

/// A route as the gateway addresses it: the session that serves it.
#[derive(Debug, Clone)]
pub struct Route {
    pub id: SessionId,
    pub name: String,
    /// `false`: the route's last session has ended (its tasks stay readable;
    /// it takes no new ones).
    pub live: bool,
}

/// What a route's agent card is made from.
#[derive(Debug, Clone)]
pub struct Agent {
    /// The route (the session's name).
    pub route: String,
    pub capsule: String,
    pub version: String,
    /// When its session started (else was recorded): the card's
    /// `Last-Modified`.
    pub since: String,
    /// Its session has ended: the card says it takes no new tasks.
    pub ended: bool,
    /// The manifest's `a2a:` section, as staging kept it.
    pub spec: CardSpec,
}

/// Where routes run, as the gateway needs it.
#[async_trait::async_trait]
pub trait Routing: Send + Sync + 'static {
    /// The route `name` (a session name or id) names: a live one, else one
    /// whose last session has ended; `None` when none ever had it.
    async fn route(&self, name: &str) -> Option<Route>;

    /// What the card of route `name` (a name, not an id) is made from:
    /// its live session's, else its last ended one's.
    async fn agent(&self, name: &str) -> Option<Agent>;
}
