//! The gateway's ports to where routes run: [`Routing`] (a route by name —
//! live, or ended with its tasks still readable — and what its agent card
//! is made from), [`Claims`] (a session taking and giving back its route,
//! which a cluster makes unique across nodes), [`Handoff`] (a request
//! for a route another node runs, carried there and answered back) and
//! [`Adopt`] (sessions a cluster moves: started here for a node that left,
//! stopped here when another node took them). The gateway knows only these
//! traits; the supervisor implements `Routing` for one host and `Adopt`
//! (`supervisor/routing.rs`), the cluster the first three (`cluster/`).

use bytes::Bytes;

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
    /// The node of the cluster that runs it (and holds its tasks); `None`:
    /// this one.
    pub node: Option<String>,
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

/// A session taking its route: what other nodes need to serve its card and
/// hand its requests over.
#[derive(Debug, Clone)]
pub struct Claim {
    pub route: String,
    pub id: SessionId,
    pub capsule: String,
    pub version: String,
    /// When it started: its card's `Last-Modified`.
    pub since: String,
    pub spec: CardSpec,
    /// How to start it on another node (when this one is drained, or
    /// leaves the cluster and its restart policy is `always` or
    /// `on-failure`).
    pub start: Option<roost_wire::api::StartRequest>,
}

/// Why a route cannot be taken.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    #[error(
        "route '{route}' is taken: session {session} runs it on node {node}; stop it there or \
         choose another --name"
    )]
    Taken {
        route: String,
        node: String,
        session: String,
    },
    #[error("cannot claim route '{route}' in the cluster: {message}; try again")]
    Unavailable { route: String, message: String },
}

/// Routes made unique beyond this process: a session claims its route
/// before it is recorded and gives it back when it ends.
#[async_trait::async_trait]
pub trait Claims: Send + Sync + 'static {
    /// Takes `claim.route` for session `claim.id` (`resumed`: the session
    /// ran here before this process, and comes back even if the claim
    /// cannot be written yet).
    async fn claim(&self, claim: Claim, resumed: bool) -> Result<(), ClaimError>;

    /// The session has ended: what this node reads says so at once (a
    /// request for its route must not find it still live here while
    /// [`Claims::release`] writes the end). Called before `release`.
    fn ended(&self, route: &str, id: &SessionId);

    /// The session has ended: its route takes no new tasks (its tasks
    /// stay readable where they are).
    async fn release(&self, route: &str, id: &SessionId);

    /// The ended session has been removed (`rm`, `prune`, retention), its
    /// tasks with it: its route's record goes too, unless another session
    /// has claimed the route since.
    async fn forget(&self, route: &str, id: &SessionId);
}

/// Sessions a cluster moves between nodes.
#[async_trait::async_trait]
pub trait Adopt: Send + Sync + 'static {
    /// Starts session `id` as `name` from `request` here: its node left the
    /// cluster and this node took its route. `arriving` (its tasks brought
    /// in) is awaited once the session's row exists and before it takes
    /// any task, so those that never started run.
    async fn adopt(
        &self,
        id: SessionId,
        name: String,
        request: roost_wire::api::StartRequest,
        arriving: futures::future::BoxFuture<'static, ()>,
    ) -> Result<(), String>;

    /// Stops session `id` here: another node runs its route now.
    async fn give_up(&self, id: SessionId, why: String);

    /// Session `id` takes no more tasks here, finishes those it runs
    /// (stopped after `within`) and ends, its queued tasks still queued:
    /// it is moving to another node.
    async fn drain(&self, id: SessionId, within: std::time::Duration) -> Result<(), String>;
}

/// A gateway request carried to the node that runs its route.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Forward {
    pub method: String,
    /// Path and query.
    pub uri: String,
    /// The request's headers (those that are text).
    pub headers: Vec<(String, String)>,
    #[serde(skip)]
    pub body: Bytes,
}

/// The start of the answer a forwarded request got.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ForwardHead {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    /// The body is a stream (SSE): passed on as it comes, not collected.
    #[serde(default)]
    pub streamed: bool,
}

/// An answer from another node: its head, then its body as it comes (a
/// stream for SSE), which ends with the answer.
pub struct Forwarded {
    pub head: ForwardHead,
    pub body: futures::stream::BoxStream<'static, Result<Bytes, HandoffError>>,
}

/// Why a request could not be carried to its node, or its answer back.
#[derive(Debug, thiserror::Error)]
pub enum HandoffError {
    #[error("node {node}, which runs this route, is not answering ({why})")]
    Unreachable { node: String, why: String },
    #[error(
        "the request is {size} bytes: a request handed to another node must fit NATS's \
         max_payload ({max} bytes; raise max_payload in nats-server's configuration)"
    )]
    TooLarge { size: usize, max: usize },
    #[error("the cluster cannot carry the request: {0}")]
    Transport(String),
}

/// Carries requests to the node that runs their route.
#[async_trait::async_trait]
pub trait Handoff: Send + Sync + 'static {
    async fn forward(&self, node: &str, request: Forward) -> Result<Forwarded, HandoffError>;

    /// This node's name (a route the table says runs here, whose session is
    /// not live yet, is being taken over here).
    fn node(&self) -> &str;
}

/// What serves requests other nodes hand to this one (the gateway, as if
/// they had come to it).
pub type Serve = std::sync::Arc<
    dyn Fn(Forward) -> futures::future::BoxFuture<'static, Forwarded> + Send + Sync + 'static,
>;
