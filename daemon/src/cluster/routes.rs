//! The cluster's route table: the `roost-routes` key-value bucket (route →
//! the node and session that run it, and what its card says), kept in
//! memory on every node by a watch, with the claim rule that makes a route
//! name unique across nodes; the `Claims` port sessions take their routes
//! through; and [`ClusterRouting`], the gateway's `Routing` port over this
//! node's routes and the table.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use async_nats::jetstream::kv;
use futures::StreamExt;
use serde::{Deserialize, Serialize};

use crate::a2a::routing::{Agent, Claim, ClaimError, Route, Routing};
use crate::ids::SessionId;
use crate::manifest::CardSpec;

/// The key-value bucket routes are claimed in.
pub const ROUTES_BUCKET: &str = "roost-routes";

/// The record format this version writes; a record of another format is
/// read as "unknown" and never overwritten blindly.
const FORMAT: u32 = 1;

/// One route as the table keeps it (the value under the route's name).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RouteRecord {
    pub format: u32,
    pub route: String,
    pub session_id: String,
    /// The node that runs it (and holds its tasks).
    pub node: String,
    /// `false`: its session has ended there (its tasks stay readable).
    pub live: bool,
    pub capsule: String,
    pub version: String,
    pub since: String,
    pub spec: CardSpec,
    /// How another node starts it: when this one is drained, or leaves the
    /// cluster and the request's restart policy is `always` or
    /// `on-failure`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<roost_wire::api::StartRequest>,
    /// Set while the route moves from node `moving_from` (drained) to
    /// `node`, which starts it; cleared by that node's claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moving_from: Option<String>,
}

impl RouteRecord {
    pub fn of(claim: Claim, node: &str) -> Self {
        Self {
            format: FORMAT,
            route: claim.route,
            session_id: claim.id.to_string(),
            node: node.to_string(),
            live: true,
            capsule: claim.capsule,
            version: claim.version,
            since: claim.since,
            spec: claim.spec,
            start: claim.start,
            moving_from: None,
        }
    }

    /// Whether a record read from the bucket may be acted on: under its
    /// own route's key, naming a node by a valid name (it becomes a NATS
    /// subject) and a session by a session id.
    fn sound(&self, key: &str) -> bool {
        self.route == key
            && crate::manifest::validate_name(&self.route).is_ok()
            && crate::manifest::validate_name(&self.node).is_ok()
            && self.session_id.strip_prefix("ses_").is_some_and(|rest| {
                !rest.is_empty()
                    && rest.len() <= 64
                    && rest.bytes().all(|b| b.is_ascii_alphanumeric())
            })
    }

    fn bytes(&self) -> bytes::Bytes {
        serde_json::to_vec(self).unwrap_or_default().into()
    }
}

/// The table as this node sees it: the bucket and the copy a watch keeps.
pub(super) struct Table {
    bucket: kv::Store,
    by_name: RwLock<HashMap<String, RouteRecord>>,
    /// Session id → route name, for routes addressed by id.
    by_id: RwLock<HashMap<String, String>>,
    /// Names the bucket did not have when last read, and when: read again
    /// only after [`MISS_FOR`], so requests for names no route has cannot
    /// make this node read the bucket once each.
    missed: Mutex<HashMap<String, std::time::Instant>>,
}

/// How long a name the bucket did not have is not read again (a route
/// claimed meanwhile reaches the copy by the watch sooner).
const MISS_FOR: std::time::Duration = std::time::Duration::from_secs(1);
/// Misses remembered at most (then forgotten all at once).
const MISSES_KEPT: usize = 10_000;

fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Table {
    /// Opens (or makes) the bucket and starts keeping the copy, until `stop`.
    pub(super) async fn open(
        js: &async_nats::jetstream::Context,
        replicas: usize,
        stop: tokio_util::sync::CancellationToken,
    ) -> Result<Arc<Self>, String> {
        let bucket = js
            .create_or_update_key_value(kv::Config {
                bucket: ROUTES_BUCKET.into(),
                description: "roostd routes: the node and session that run each route".into(),
                history: 1,
                num_replicas: replicas,
                ..Default::default()
            })
            .await
            .map_err(|e| e.to_string())?;
        let table = Arc::new(Self {
            bucket,
            by_name: RwLock::default(),
            by_id: RwLock::default(),
            missed: Mutex::default(),
        });
        tokio::spawn(Arc::clone(&table).keep(stop));
        Ok(table)
    }

    /// Follows the bucket (every route's latest record, then each change)
    /// into the copy; watches again when the watch ends.
    async fn keep(self: Arc<Self>, stop: tokio_util::sync::CancellationToken) {
        while !stop.is_cancelled() {
            match self.bucket.watch_with_history(">").await {
                Ok(mut watch) => loop {
                    let next = tokio::select! {
                        () = stop.cancelled() => return,
                        next = watch.next() => next,
                    };
                    match next {
                        Some(Ok(entry)) => self.note(&entry.key, entry.operation, &entry.value),
                        Some(Err(error)) => {
                            tracing::warn!(%error, "the route table's watch failed; watching again");
                            break;
                        }
                        None => break,
                    }
                },
                Err(error) => tracing::warn!(%error, "cannot watch the route table; trying again"),
            }
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
            }
        }
    }

    fn note(&self, key: &str, operation: kv::Operation, value: &[u8]) {
        let record = match operation {
            kv::Operation::Put => serde_json::from_slice::<RouteRecord>(value).ok(),
            kv::Operation::Delete | kv::Operation::Purge => None,
        };
        let mut names = write(&self.by_name);
        let mut ids = write(&self.by_id);
        if let Some(old) = names.remove(key) {
            ids.remove(&old.session_id);
        }
        if let Some(record) = record.filter(|r| r.sound(key)) {
            ids.insert(record.session_id.clone(), key.to_string());
            names.insert(key.to_string(), record);
        }
    }

    /// The record of route `name` (a name or a session id): from the copy,
    /// else (a route claimed a moment ago) read from the bucket, when
    /// `connected` (cut off from NATS, a read would only wait).
    pub(super) async fn lookup(&self, name: &str, connected: bool) -> Option<RouteRecord> {
        if let Some(record) = read(&self.by_name).get(name) {
            return Some(record.clone());
        }
        if let Some(route) = read(&self.by_id).get(name) {
            return read(&self.by_name).get(route).cloned();
        }
        if !connected || self.missed_lately(name) {
            return None;
        }
        let found = match self.bucket.entry(name).await {
            Ok(Some(entry)) => {
                self.note(&entry.key, entry.operation, &entry.value);
                read(&self.by_name).get(name).cloned()
            }
            Ok(None) | Err(_) => None,
        };
        if found.is_none() {
            let mut missed = self.missed.lock().unwrap_or_else(|e| e.into_inner());
            if missed.len() >= MISSES_KEPT {
                missed.clear();
            }
            missed.insert(name.to_string(), std::time::Instant::now());
        }
        found
    }

    /// Whether the bucket lacked `name` less than [`MISS_FOR`] ago.
    fn missed_lately(&self, name: &str) -> bool {
        let missed = self.missed.lock().unwrap_or_else(|e| e.into_inner());
        missed.get(name).is_some_and(|at| at.elapsed() < MISS_FOR)
    }

    pub(super) fn bucket(&self) -> &kv::Store {
        &self.bucket
    }

    /// The node whose live record `route` has in the copy.
    pub(super) fn live_holder(&self, route: &str) -> Option<String> {
        read(&self.by_name)
            .get(route)
            .filter(|r| r.live)
            .map(|r| r.node.clone())
    }

    /// Every record in the copy.
    pub(super) fn all(&self) -> Vec<RouteRecord> {
        read(&self.by_name).values().cloned().collect()
    }

    /// Takes the route for `record` (of this node): refused while another
    /// live node (one in the registry, `nodes`) runs it — another session,
    /// or this very one, which that node took over; a record of an ended
    /// session, of a node that has left, or this node's own is replaced.
    /// Compare-and-set, so two nodes claiming at once cannot both win.
    pub(super) async fn claim(
        &self,
        record: &RouteRecord,
        nodes: &kv::Store,
    ) -> Result<(), ClaimError> {
        let unavailable = |e: &dyn std::fmt::Display| ClaimError::Unavailable {
            route: record.route.clone(),
            message: e.to_string(),
        };
        // A server lost a moment ago leaves the bucket without responders
        // until its replicas move: such failures are tried again for 10 s.
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut raced = 0;
        while raced < 8 {
            let entry = match self.bucket.entry(record.route.as_str()).await {
                Ok(entry) => entry,
                Err(error) if tokio::time::Instant::now() < deadline => {
                    tracing::debug!(route = %record.route, %error, "route table not answering; trying again");
                    tokio::time::sleep(std::time::Duration::from_millis(250)).await;
                    continue;
                }
                Err(error) => return Err(unavailable(&error)),
            };
            let written = match entry {
                Some(entry) if entry.operation == kv::Operation::Put => {
                    let held = serde_json::from_slice::<RouteRecord>(&entry.value).ok();
                    // The same session's live record on another live node
                    // is taken too: that node took the session over (a
                    // node coming back must not take it back).
                    if let Some(held) = &held
                        && held.live
                        && held.node != record.node
                        && !matches!(nodes.get(&held.node).await, Ok(None))
                    {
                        return Err(ClaimError::Taken {
                            route: record.route.clone(),
                            node: held.node.clone(),
                            session: held.session_id.clone(),
                        });
                    }
                    if held.as_ref().is_some_and(|h| h.format > FORMAT) {
                        return Err(unavailable(&format!(
                            "its record was written by a newer roostd (format {})",
                            held.map_or(0, |h| h.format)
                        )));
                    }
                    self.bucket
                        .update(record.route.as_str(), record.bytes(), entry.revision)
                        .await
                        .map(|_| ())
                        .map_err(|e| e.kind() != kv::UpdateErrorKind::WrongLastRevision)
                }
                _ => self
                    .bucket
                    .create(record.route.as_str(), record.bytes())
                    .await
                    .map(|_| ())
                    .map_err(|e| e.kind() != kv::CreateErrorKind::AlreadyExists),
            };
            match written {
                Ok(()) => {
                    self.note(&record.route, kv::Operation::Put, &record.bytes());
                    return Ok(());
                }
                // Another node wrote first: read again and decide again.
                Err(false) => raced += 1,
                Err(true) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(std::time::Duration::from_millis(250)).await;
                }
                Err(true) => return Err(unavailable(&"the route table refused the write")),
            }
        }
        Err(unavailable(&"the route changed hands too often"))
    }

    /// The record of `route` and its revision, if it is session `id`'s on
    /// node `node` (what only that node may mark ended or remove).
    async fn ours(&self, route: &str, id: &str, node: &str) -> Option<(u64, RouteRecord)> {
        let entry = self.bucket.entry(route).await.ok()??;
        let held = serde_json::from_slice::<RouteRecord>(&entry.value).ok()?;
        (entry.operation == kv::Operation::Put && held.session_id == id && held.node == node)
            .then_some((entry.revision, held))
    }

    /// The copy's record of `route`, if it is session `id`'s live one on
    /// node `node`, is marked ended now (the watch brings the bucket's
    /// word, written by [`Table::release`], after).
    pub(super) fn ended_here(&self, route: &str, id: &str, node: &str) {
        if let Some(record) = write(&self.by_name)
            .get_mut(route)
            .filter(|r| r.session_id == id && r.node == node)
        {
            record.live = false;
        }
    }

    /// Marks the route of session `id` on node `node` ended (unless it has
    /// since been claimed by another).
    pub(super) async fn release(&self, route: &str, id: &str, node: &str) {
        let Some((revision, mut held)) = self.ours(route, id, node).await else {
            return;
        };
        held.live = false;
        if let Err(error) = self.bucket.update(route, held.bytes(), revision).await {
            tracing::debug!(route, %error, "route taken again before its end was written");
        }
    }

    /// Deletes the record of route `route` if it is still the ended one of
    /// session `id` on node `node` (compare-and-set: a claim since wins).
    pub(super) async fn forget(&self, route: &str, id: &str, node: &str) {
        let Some((revision, held)) = self.ours(route, id, node).await else {
            return;
        };
        if held.live {
            return;
        }
        match self
            .bucket
            .delete_expect_revision(route, Some(revision))
            .await
        {
            Ok(()) => self.note(route, kv::Operation::Delete, &[]),
            Err(error) => {
                tracing::debug!(route, %error, "route claimed again before its record was removed")
            }
        }
    }

    /// At joining: this node's live records, left by the process before a
    /// restart (sessions it has not claimed again), are marked ended; its
    /// sessions that come back claim theirs again.
    pub(super) async fn disown_stale(&self, node: &str, keep: &[String]) {
        let Ok(mut keys) = self.bucket.keys().await else {
            return;
        };
        let mut names = Vec::new();
        while let Some(Ok(key)) = keys.next().await {
            names.push(key);
        }
        for name in names.into_iter().filter(|n| !keep.contains(n)) {
            let Ok(Some(entry)) = self.bucket.entry(name.as_str()).await else {
                continue;
            };
            if let Ok(held) = serde_json::from_slice::<RouteRecord>(&entry.value)
                && held.node == node
                && held.live
            {
                self.release(&held.route, &held.session_id, node).await;
            }
        }
    }
}

#[async_trait::async_trait]
impl crate::a2a::routing::Claims for super::Cluster {
    async fn claim(&self, claim: Claim, resumed: bool) -> Result<(), ClaimError> {
        if self.draining.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(ClaimError::Unavailable {
                route: claim.route,
                message: format!(
                    "node {} is being drained; start it on another node",
                    self.node
                ),
            });
        }
        let record = RouteRecord::of(claim, &self.node);
        // Not joined yet (`cluster.required: false`): served here, and
        // written to the table once joined.
        let claimed = match self.joined.get() {
            None => Ok(()),
            Some(joined) => match joined.routes.claim(&record, &joined.nodes).await {
                Err(ClaimError::Unavailable { message, .. }) if resumed => {
                    tracing::warn!(route = %record.route, session_id = %record.session_id, error = %message,
                        "the cluster cannot take this route now; it is served here and written later");
                    Ok(())
                }
                claimed => claimed,
            },
        };
        if claimed.is_ok() {
            self.mine.add(record);
        }
        claimed
    }

    fn ended(&self, route: &str, id: &SessionId) {
        self.mine.remove(route, id.as_str());
        if let Some(joined) = self.joined.get() {
            joined.routes.ended_here(route, id.as_str(), &self.node);
        }
    }

    async fn release(&self, route: &str, id: &SessionId) {
        self.mine.remove(route, id.as_str());
        if let Some(joined) = self.joined.get() {
            joined.routes.release(route, id.as_str(), &self.node).await;
        }
    }

    async fn forget(&self, route: &str, id: &SessionId) {
        self.mine.remove(route, id.as_str());
        if let Some(joined) = self.joined.get() {
            joined.routes.forget(route, id.as_str(), &self.node).await;
        }
    }
}

/// This node's claims, kept to be written again when the table could not
/// take them (not joined yet, or NATS out of reach).
#[derive(Default)]
pub(super) struct Mine(Mutex<HashMap<String, RouteRecord>>);

impl Mine {
    pub(super) fn add(&self, record: RouteRecord) {
        self.lock().insert(record.route.clone(), record);
    }

    pub(super) fn remove(&self, route: &str, id: &str) {
        let mut mine = self.lock();
        if mine.get(route).is_some_and(|r| r.session_id == id) {
            mine.remove(route);
        }
    }

    pub(super) fn all(&self) -> Vec<RouteRecord> {
        self.lock().values().cloned().collect()
    }

    /// Whether this node runs route `route`.
    pub(super) fn has(&self, route: &str) -> bool {
        self.lock().contains_key(route)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, RouteRecord>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The gateway's routing on a node of a cluster: this node's live routes
/// first (no NATS on that path), then the cluster's table (a route another
/// node runs, live or ended), then this node's ended routes.
pub struct ClusterRouting {
    pub local: Arc<dyn Routing>,
    pub cluster: Arc<super::Cluster>,
}

impl ClusterRouting {
    async fn elsewhere(&self, name: &str) -> Option<RouteRecord> {
        self.cluster
            .route_record(name)
            .await
            .filter(|r| r.node != self.cluster.node())
    }

    /// A live route the table says runs here but whose session is not
    /// live here (yet): being taken over from a node that left.
    async fn arriving(&self, name: &str) -> Option<Route> {
        let record = self
            .cluster
            .route_record(name)
            .await
            .filter(|r| r.live && r.node == self.cluster.node())?;
        Some(Route {
            id: SessionId::from(record.session_id),
            name: record.route,
            live: true,
            node: Some(record.node),
        })
    }
}

#[async_trait::async_trait]
impl Routing for ClusterRouting {
    /// The table names the latest session to claim a route: one on
    /// another node wins over this node's ended one (and a live one there
    /// means none is live here), so a route another node runs costs no
    /// database read here.
    async fn route(&self, name: &str) -> Option<Route> {
        let remote = |record: RouteRecord| Route {
            id: SessionId::from(record.session_id),
            name: record.route,
            live: record.live,
            node: Some(record.node),
        };
        match self.elsewhere(name).await {
            Some(record) if record.live => Some(remote(record)),
            Some(record) => match self.local.route(name).await {
                Some(here) if here.live => Some(here),
                _ => Some(remote(record)),
            },
            None => match self.local.route(name).await {
                Some(here) if here.live => Some(here),
                here => self.arriving(name).await.or(here),
            },
        }
    }

    async fn agent(&self, name: &str) -> Option<Agent> {
        let remote = |record: RouteRecord| Agent {
            route: record.route,
            capsule: record.capsule,
            version: record.version,
            since: record.since,
            ended: !record.live,
            spec: record.spec,
        };
        match self.elsewhere(name).await.filter(|r| r.route == name) {
            Some(record) if record.live => Some(remote(record)),
            Some(record) => match self.local.agent(name).await {
                Some(here) if !here.ended => Some(here),
                _ => Some(remote(record)),
            },
            None => self.local.agent(name).await,
        }
    }
}
