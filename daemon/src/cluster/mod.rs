//! roostd as a node of a cluster over NATS JetStream: joining (connect,
//! authenticated, in `connect.rs`, retrying while the servers cannot be
//! reached or JetStream is not ready; then register in the node registry,
//! `nodes.rs`, and open the route table, `routes.rs`, and the hand-over of
//! requests, `handoff.rs`),
//! writing this node's routes again when NATS is back, and leaving. The
//! only module that names `async_nats`.

pub mod artifacts;
pub mod control;
mod drain;
mod failover;
mod handoff;
pub use handoff::{pack, unpack};
pub mod journal;
mod nodes;
mod place;
pub mod routes;

mod connect;
pub use connect::inbox_prefix;
use connect::{check_private, connect};
pub use drain::DrainError;
pub use nodes::{NODES_BUCKET, NodeRecord, heartbeat_age_ms, host_name, node_name};
use nodes::{heartbeat, now_ms, put};
pub use place::{PlaceError, Starter};

use std::time::Duration;

use async_nats::jetstream::kv;
use tokio_util::sync::CancellationToken;

use crate::a2a::routing::Serve;
use crate::config::ClusterConfig;
use routes::{Mine, RouteRecord, Table};

/// Why roostd could not join (or read) its cluster.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("cannot read the NATS credentials file {}: {source}", path.display())]
    Credentials {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{what} {}: {message}", path.display())]
    Private {
        what: &'static str,
        path: std::path::PathBuf,
        message: String,
    },
    #[error("cannot reach NATS at {servers}: {message}")]
    Connect { servers: String, message: String },
    #[error(
        "JetStream at {servers} refused the node registry (is JetStream enabled, `nats-server \
         -js`?): {message}"
    )]
    Registry { servers: String, message: String },
    #[error(
        "node name '{node}' is taken: a live node registered it ({gateway}); give this roostd \
         another cluster.node (--node)"
    )]
    NodeTaken { node: String, gateway: String },
    #[error("no node name: cluster.node is unset and the host name '{host}' is not one ({why})")]
    NoName { host: String, why: String },
    #[error("the cluster's node registry: {0}")]
    Read(String),
}

/// What a heartbeat reads the node's load from (set once the supervisor
/// runs; 0 until then).
type Load = std::sync::Arc<std::sync::OnceLock<Box<dyn Fn() -> u64 + Send + Sync>>>;

/// This node of the cluster: joined, or still trying (`cluster.required:
/// false`, which serves local capsules meanwhile).
pub struct Cluster {
    node: String,
    servers: String,
    /// What `cluster.insecure` lets through, when anything.
    weakness: Option<String>,
    /// The node registry, the route table and the connection, once joined.
    joined: std::sync::OnceLock<Joined>,
    /// What serves requests other nodes hand to this one (the gateway, set
    /// once it exists).
    serve: std::sync::Arc<std::sync::OnceLock<handoff::Server>>,
    /// This node's routes, written again when the table could not take
    /// them.
    mine: std::sync::Arc<Mine>,
    /// Why it has not joined (yet), while it has not.
    trying: std::sync::Mutex<Option<String>>,
    stop: CancellationToken,
    load: Load,
    /// What starts and stops sessions the cluster moves, and the journal
    /// their tasks come from (set once the supervisor runs).
    movers: std::sync::OnceLock<failover::Movers>,
    /// Being drained: takes no new sessions and no other node's routes.
    draining: std::sync::atomic::AtomicBool,
    /// What starts sessions other nodes place here (set once the control
    /// API exists).
    starts: std::sync::OnceLock<place::Starter>,
    /// What answers control calls other nodes carry here (set once the
    /// control API exists).
    controls: std::sync::OnceLock<control::Controls>,
}

/// What a joined node holds of the cluster.
struct Joined {
    client: async_nats::Client,
    js: async_nats::jetstream::Context,
    replies: std::sync::Arc<handoff::Replies>,
    nodes: kv::Store,
    routes: std::sync::Arc<Table>,
    artifacts: artifacts::Buckets,
}

impl Cluster {
    /// Joins: connects (retrying every 2 s until `stop` while the servers
    /// cannot be reached, saying so), makes sure the node registry exists,
    /// and registers this node — refused when a live node has its name.
    /// With `cluster.required` (the default) this returns once joined (so
    /// roostd is READY only then); without, at once, and joining goes on
    /// in the background (`/v1/health` says how it goes).
    pub async fn join(
        config: &ClusterConfig,
        me: NodeRecord,
        stop: CancellationToken,
    ) -> Result<std::sync::Arc<Self>, ClusterError> {
        check_private(config)?;
        let weakness = config.weakness();
        if let Some(weak) = &weakness {
            tracing::warn!(node = %me.node, "{weak}; give each node its own NATS user (roostctl \
                cluster nats-config) and TLS beyond loopback");
        }
        let cluster = std::sync::Arc::new(Self {
            node: me.node.clone(),
            servers: config.servers.join(","),
            weakness,
            joined: std::sync::OnceLock::new(),
            serve: std::sync::Arc::default(),
            mine: std::sync::Arc::default(),
            trying: std::sync::Mutex::new(Some("connecting".into())),
            stop: stop.child_token(),
            load: Load::default(),
            movers: std::sync::OnceLock::new(),
            draining: std::sync::atomic::AtomicBool::new(false),
            starts: std::sync::OnceLock::new(),
            controls: std::sync::OnceLock::new(),
        });
        if config.required {
            std::sync::Arc::clone(&cluster)
                .register(config.clone(), me)
                .await?;
        } else {
            let joining = std::sync::Arc::clone(&cluster);
            let config = config.clone();
            tokio::spawn(async move {
                if let Err(error) = std::sync::Arc::clone(&joining).register(config, me).await
                    && !joining.stop.is_cancelled()
                {
                    tracing::error!(%error, "cannot join the cluster; serving local capsules only");
                    joining.tried(error.to_string());
                }
            });
        }
        Ok(cluster)
    }

    fn tried(&self, why: String) {
        *self.trying.lock().unwrap_or_else(|e| e.into_inner()) = Some(why);
    }

    /// Says why joining waits (`status`, `doctor`), then waits 2 s (or
    /// until `stop`) before the next try.
    async fn retry_later(&self, why: String) {
        self.tried(format!("not joined yet: {why}; retrying"));
        tokio::select! {
            () = self.stop.cancelled() => {}
            () = tokio::time::sleep(Duration::from_secs(2)) => {}
        }
    }

    async fn register(
        self: std::sync::Arc<Self>,
        config: ClusterConfig,
        mut me: NodeRecord,
    ) -> Result<(), ClusterError> {
        let servers = self.servers.clone();
        let client = loop {
            match connect(&config, &me.node).await {
                Ok(client) => break client,
                Err(ClusterError::Connect { message, .. }) if !self.stop.is_cancelled() => {
                    tracing::warn!(servers, error = %message, "cannot reach NATS yet; retrying in 2 s");
                    self.retry_later(format!("cannot reach NATS at {servers}: {message}"))
                        .await;
                }
                Err(error) => return Err(error),
            }
        };
        let registry = |e: &dyn std::fmt::Display| ClusterError::Registry {
            servers: servers.clone(),
            message: e.to_string(),
        };
        let js = async_nats::jetstream::new(client.clone());
        // A NATS cluster that is starting too has no JetStream leader yet,
        // and a new replicated bucket waits for its own: requests time out
        // meanwhile. Waited for, as for the servers themselves; both
        // buckets, the task journal and the artifact registry at once.
        let (bucket, routes, journal, artifacts) = tokio::join!(
            self.until_ready(|| js.create_or_update_key_value(kv::Config {
                bucket: NODES_BUCKET.into(),
                description: "roostd nodes: each node's record, kept alive by its heartbeat".into(),
                history: 1,
                max_age: Duration::from_secs(config.node_ttl_secs),
                num_replicas: config.replicas,
                ..Default::default()
            })),
            self.until_ready(|| Table::open(&js, config.replicas, self.stop.clone())),
            self.until_ready(|| journal::open(&js, config.replicas)),
            self.until_ready(|| artifacts::open(&js, config.replicas)),
        );
        let (bucket, routes, _journal, artifacts) = (bucket?, routes?, journal?, artifacts?);
        let theirs = self.until_ready(|| bucket.get(&me.node)).await?;
        if let Some(entry) = theirs
            && let Ok(other) = serde_json::from_slice::<NodeRecord>(&entry)
            && other.instance != me.instance
            && (other.host, other.state_dir) != (me.host.clone(), me.state_dir.clone())
        {
            return Err(ClusterError::NodeTaken {
                node: me.node,
                gateway: other.gateway_url,
            });
        }
        let replies = handoff::Replies::start(&client, self.stop.clone())
            .await
            .map_err(|e| registry(&e))?;
        handoff::serve(
            client.clone(),
            me.node.clone(),
            std::sync::Arc::clone(&self.serve),
            self.stop.clone(),
        )
        .await
        .map_err(|e| registry(&e))?;
        drain::serve(std::sync::Arc::clone(&self), client.clone())
            .await
            .map_err(|e| registry(&e))?;
        place::serve(std::sync::Arc::clone(&self), client.clone())
            .await
            .map_err(|e| registry(&e))?;
        control::serve(std::sync::Arc::clone(&self), client.clone())
            .await
            .map_err(|e| registry(&e))?;
        me.heartbeat_ms = now_ms();
        me.live_sessions = self.load.get().map_or(0, |live| live());
        self.until_ready(|| put(&bucket, &me)).await?;
        // Routes this node's previous process left live are ended; those
        // its sessions claimed while it was not joined yet are written.
        let mine: Vec<String> = self.mine.all().into_iter().map(|r| r.route).collect();
        routes.disown_stale(&me.node, &mine).await;
        let _ = self.joined.set(Joined {
            client,
            js: js.clone(),
            replies,
            nodes: bucket.clone(),
            routes: std::sync::Arc::clone(&routes),
            artifacts,
        });
        self.claim_mine().await;
        tracing::info!(node = %me.node, servers, "joined the cluster");
        *self.trying.lock().unwrap_or_else(|e| e.into_inner()) = None;
        tokio::spawn(failover::watch(std::sync::Arc::clone(&self)));
        tokio::spawn(heartbeat(
            std::sync::Arc::clone(&self),
            bucket,
            me,
            Duration::from_secs(config.node_ttl_secs),
        ));
        Ok(())
    }

    /// `make`, again every 2 s while JetStream is not ready, until `stop`;
    /// any other error is the registry's. Not ready: its requests time out,
    /// or no server answers them (`503 no responders`: a stream whose
    /// leader is being elected, as right after a bucket is made on a
    /// cluster that is starting; also a server without JetStream, which
    /// the log then names).
    async fn until_ready<T, E, F, Fut>(&self, mut make: F) -> Result<T, ClusterError>
    where
        E: std::fmt::Display,
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, E>>,
    {
        let servers = &self.servers;
        loop {
            match make().await {
                Ok(made) => return Ok(made),
                Err(error) if not_ready(&error.to_string()) && !self.stop.is_cancelled() => {
                    tracing::warn!(servers, %error,
                        "JetStream is not ready yet (a cluster electing its leaders, or a server \
                         started without `-js`?); retrying in 2 s");
                    self.retry_later(format!("JetStream at {servers} is not ready: {error}"))
                        .await;
                }
                Err(error) => {
                    return Err(ClusterError::Registry {
                        servers: servers.clone(),
                        message: error.to_string(),
                    });
                }
            }
        }
    }

    /// Writes this node's routes into the table again (after joining, or
    /// when NATS is back after a heartbeat could not reach it).
    async fn claim_mine(&self) {
        let Some(joined) = self.joined.get() else {
            return;
        };
        for record in self.mine.all() {
            if let Err(error) = joined.routes.claim(&record, &joined.nodes).await {
                tracing::error!(route = %record.route, session_id = %record.session_id, %error,
                    "this node's route could not be written to the cluster's route table");
            }
        }
    }

    /// The cluster's record of route `name` (a name or a session id).
    pub async fn route_record(&self, name: &str) -> Option<RouteRecord> {
        let joined = self.joined.get()?;
        let connected =
            joined.client.connection_state() == async_nats::connection::State::Connected;
        joined.routes.lookup(name, connected).await
    }

    /// Every route in the cluster's table (live and ended), as this node's
    /// copy has it.
    pub fn route_records(&self) -> Vec<RouteRecord> {
        self.joined
            .get()
            .map(|j| j.routes.all())
            .unwrap_or_default()
    }

    /// Requests other nodes hand to this one are served by `serve` from
    /// now, `most` at once (more are refused: try again).
    pub fn serve_handoffs(&self, serve: Serve, most: usize) {
        let _ = self.serve.set(handoff::Server::new(serve, most.max(1)));
    }

    pub fn node(&self) -> &str {
        &self.node
    }

    /// What `cluster.insecure` lets through (`status`, `doctor`), when
    /// anything.
    pub fn weakness(&self) -> Option<&str> {
        self.weakness.as_deref()
    }

    /// The broker's task log on this node: `local` (this node's SQLite),
    /// each task and event journaled in the cluster's stream too.
    pub fn task_log(
        self: &std::sync::Arc<Self>,
        local: std::sync::Arc<dyn crate::tasks::log::TaskLog>,
    ) -> std::sync::Arc<journal::Journal> {
        std::sync::Arc::new(journal::Journal::new(local, std::sync::Arc::clone(self)))
    }

    /// From now on this node takes over the routes of nodes that leave
    /// (starting their sessions through `adopt`, their tasks from
    /// `journal`) and gives up those another node took.
    pub fn move_sessions(
        &self,
        adopt: std::sync::Arc<dyn crate::a2a::routing::Adopt>,
        journal: std::sync::Arc<journal::Journal>,
    ) {
        let _ = self.movers.set(failover::Movers { adopt, journal });
    }

    /// JetStream, once joined.
    fn jetstream(&self) -> Option<&async_nats::jetstream::Context> {
        self.joined.get().map(|j| &j.js)
    }

    /// The node that runs `route` now, as this node's copy of the table has
    /// it (a live record only).
    fn holder(&self, route: &str) -> Option<String> {
        let joined = self.joined.get()?;
        joined.routes.live_holder(route)
    }

    /// Where each heartbeat reads this node's live sessions from.
    pub fn report_load(&self, live_sessions: impl Fn() -> u64 + Send + Sync + 'static) {
        let _ = self.load.set(Box::new(live_sessions));
    }

    /// Leaves: the heartbeat stops and the entry goes at once (a node that
    /// dies instead is gone when its entry's lifetime ends).
    pub async fn leave(&self) {
        self.stop.cancel();
        let Some(bucket) = self.joined.get().map(|j| &j.nodes) else {
            return;
        };
        if let Err(error) = bucket.delete(&self.node).await {
            tracing::warn!(node = %self.node, servers = %self.servers, %error,
                "cannot remove this node from the cluster; it expires with its heartbeat");
        }
    }
}

/// How many requests of one kind a node answers at once.
struct Bound {
    /// Answered at once; more are refused with `busy`.
    most: usize,
    /// What goes back to a request refused because `most` are answered.
    busy: Vec<u8>,
}

/// Answers the requests other nodes send to `subject` until roostd stops:
/// each body through `answer` (in a task of its own, at most `bound.most`
/// at once: past them, `bound.busy` goes back at once), whose bytes go
/// back to the asker (`None`: nothing goes back). `what` names them in the
/// log.
async fn answer_requests<F, Fut>(
    cluster: std::sync::Arc<Cluster>,
    client: async_nats::Client,
    subject: String,
    what: &'static str,
    bound: Bound,
    answer: F,
) -> Result<(), String>
where
    F: Fn(std::sync::Arc<Cluster>, bytes::Bytes) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Option<Vec<u8>>> + Send + 'static,
{
    use futures::StreamExt;
    let mut requests = client.subscribe(subject).await.map_err(|e| e.to_string())?;
    let answer = std::sync::Arc::new(answer);
    let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(bound.most.max(1)));
    let busy = bytes::Bytes::from(bound.busy);
    tokio::spawn(async move {
        loop {
            let request = tokio::select! {
                () = cluster.stop.cancelled() => return,
                request = requests.next() => request,
            };
            let Some(request) = request else { return };
            let Some(reply) = request.reply.clone() else {
                continue;
            };
            let Ok(slot) = std::sync::Arc::clone(&slots).try_acquire_owned() else {
                tracing::warn!(
                    what,
                    most = bound.most,
                    "another node's request refused: this node answers as many of them as it takes at once"
                );
                if let Err(error) = client.publish(reply, busy.clone()).await {
                    tracing::warn!(%error, what, "cannot answer a request from another node");
                }
                continue;
            };
            let (client, answered) = (
                client.clone(),
                answer(std::sync::Arc::clone(&cluster), request.payload),
            );
            tokio::spawn(async move {
                let answered = answered.await;
                drop(slot);
                let Some(body) = answered else { return };
                if let Err(error) = client.publish(reply, body.into()).await {
                    tracing::warn!(%error, what, "cannot answer a request from another node");
                }
            });
        }
    });
    Ok(())
}

/// A JetStream request that may succeed when tried again: it timed out,
/// or no server answered it (a stream without a leader yet).
fn not_ready(error: &str) -> bool {
    error.contains("timed out") || error.contains("no responders")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jetstream_electing_its_leaders_is_waited_for_and_a_refusal_is_not() {
        assert!(not_ready(
            "failed getting entry: unable to get message: 503 no responders"
        ));
        assert!(not_ready("JetStream error: timed out"));
        assert!(!not_ready("insufficient resources"));
        assert!(!not_ready("authorization violation"));
    }
}
