//! What every session shares, built once at start-up (`Shared`), and the
//! route table of recorded live sessions that the A2A gateway reads on every
//! request.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use crate::a2a::routing::Route;
use crate::config::DaemonConfig;
use crate::ids::SessionId;
use crate::metrics::Metrics;
use crate::runtime::Runtime;
use crate::store::Store;

/// Everything sessions share: built once at start-up.
pub struct Shared {
    pub config: DaemonConfig,
    pub store: Store,
    pub runtime: Runtime,
    pub metrics: Arc<Metrics>,
    /// Where artifacts are staged from (`registry()`; a reload may swap it).
    registry: std::sync::RwLock<Arc<dyn crate::registry::Registry>>,
    /// The helper that jails native and shell tools, or why there is none.
    pub jail: crate::sandbox::Jail,
    /// What this host can enforce for tools (detected once).
    pub support: crate::sandbox::Support,
    /// What no capsule is handed (roostd's own files, system trees), with
    /// the fence every grant is opened through, resolved once.
    pub protected: crate::policy::Protected,
    /// The uids tools run as, when roostd runs as root (else `None`).
    pub tool_uids: Option<crate::sandbox::identity::UidRange>,
    /// Per-tool pids cgroups, where this host lets roostd make them.
    pub pids: Option<Arc<crate::sandbox::cgroup::PidsCgroups>>,
    /// Artifacts already verified and compiled on this runtime, by bundle hash.
    pub bundles: Arc<crate::artifacts::BundleMemo>,
    /// `http://host:port` of the A2A gateway, for `MURMUR_CAPSULE_URL`.
    pub a2a_base: String,
    /// A2A tasks: accepted durably, delivered to sessions, streamed to clients.
    pub tasks: Arc<crate::tasks::Broker>,
    /// Signs agents' checkpoints (`None` if the key could not be read or made).
    pub checkpoint_key: Option<crate::agent::checkpoint::CheckpointKey>,
    pub(super) live_count: AtomicU64,
    pub(super) launches_ended: AtomicU64,
    /// ACL entries sessions' tool uids hold, taken back with the last.
    pub(super) grants: super::grants::ToolGrants,
    /// Resuming after a restart: sessions to bring back and tried so far
    /// (`None` when not resuming).
    pub(super) resume: std::sync::Mutex<Option<roost_wire::api::ResumeProgress>>,
    /// Recorded live sessions by name and by id, for the A2A gateway's
    /// per-request lookup (no database read).
    pub(super) routes: Arc<Routes>,
    /// Where routes are claimed beyond this process (a cluster's route
    /// table); `None` on one host.
    pub(super) claims: Option<Arc<dyn crate::a2a::routing::Claims>>,
    /// Poked when a session writes its manifest's schedules (the
    /// scheduler looks again).
    pub(super) schedules_changed: Arc<tokio::sync::Notify>,
}

/// What `Shared` is made of, wired by the daemon's start-up.
pub struct SharedParts {
    pub config: DaemonConfig,
    pub store: Store,
    pub runtime: Runtime,
    pub metrics: Arc<Metrics>,
    pub registry: Arc<dyn crate::registry::Registry>,
    pub host_jail: crate::sandbox::HostJail,
    pub a2a_base: String,
    pub tasks: Arc<crate::tasks::Broker>,
    pub checkpoint_key: Option<crate::agent::checkpoint::CheckpointKey>,
    /// The route table, shared with the runtime's outbox (`a2a::client`).
    pub routes: Arc<Routes>,
    /// A cluster's route table, where sessions claim their routes.
    pub claims: Option<Arc<dyn crate::a2a::routing::Claims>>,
    /// Poked when a session writes its manifest's schedules.
    pub schedules_changed: Arc<tokio::sync::Notify>,
}

/// Recorded live sessions by name and by id: what the A2A gateway and
/// guests' messages to peers on this daemon address, read without the
/// database.
#[derive(Default)]
pub struct Routes(std::sync::RwLock<HashMap<String, Route>>);

impl Routes {
    pub fn get(&self, id_or_name: &str) -> Option<Route> {
        self.0.read().ok().and_then(|r| r.get(id_or_name).cloned())
    }

    fn add(&self, id: &SessionId, name: &str) {
        let route = Route {
            id: id.clone(),
            name: name.to_string(),
            live: true,
            node: None,
        };
        if let Ok(mut routes) = self.0.write() {
            routes.insert(name.to_string(), route.clone());
            routes.insert(id.to_string(), route);
        }
    }

    fn remove(&self, id: &SessionId, name: &str) {
        if let Ok(mut routes) = self.0.write() {
            routes.remove(id.as_str());
            if routes.get(name).is_some_and(|r| &r.id == id) {
                routes.remove(name);
            }
        }
    }
}

impl Shared {
    pub fn new(parts: SharedParts) -> Self {
        let SharedParts {
            config,
            store,
            runtime,
            metrics,
            registry,
            host_jail,
            a2a_base,
            tasks,
            checkpoint_key,
            routes,
            claims,
            schedules_changed,
        } = parts;
        let protected = crate::staging::protected(&config, &host_jail.jail);
        Self {
            protected,
            tasks,
            pids: host_jail.pids,
            checkpoint_key,
            support: host_jail.support,
            tool_uids: host_jail.tool_uids,
            jail: host_jail.jail,
            registry: std::sync::RwLock::new(registry),
            bundles: Arc::default(),
            config,
            store,
            runtime,
            metrics,
            a2a_base,
            live_count: AtomicU64::new(0),
            launches_ended: AtomicU64::new(0),
            grants: Default::default(),
            resume: std::sync::Mutex::new(None),
            routes,
            claims,
            schedules_changed,
        }
    }

    /// What staging reads of it.
    pub fn stage_ctx(&self) -> crate::staging::StageCtx<'_> {
        crate::staging::StageCtx {
            config: &self.config,
            runtime: &self.runtime,
            registry: self.registry(),
            progress: crate::staging::Progress::default(),
            bundles: &self.bundles,
            jail: &self.jail,
            support: &self.support,
            protected: &self.protected,
        }
    }

    /// Where artifacts come from now.
    pub fn registry(&self) -> Arc<dyn crate::registry::Registry> {
        Arc::clone(
            &self
                .registry
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// Artifacts come from `registry` from now on (`roostd` reloading its
    /// config); sessions that run keep the one they started with.
    pub fn set_registry(&self, registry: Arc<dyn crate::registry::Registry>) {
        *self
            .registry
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = registry;
    }

    /// A recorded session starts taking requests at its name and its id.
    pub(crate) fn add_route(&self, id: &SessionId, name: &str) {
        self.routes.add(id, name);
    }

    /// The session has ended: its route here goes, and in the cluster it
    /// is marked ended (in the background; the owner never waits on it).
    pub(super) fn remove_route(&self, id: &SessionId, name: &str) {
        self.routes.remove(id, name);
        if let Some(claims) = &self.claims {
            claims.ended(name, id);
            let (claims, id, name) = (Arc::clone(claims), id.clone(), name.to_string());
            tokio::spawn(async move { claims.release(&name, &id).await });
        }
    }
}
