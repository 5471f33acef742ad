//! Schedules: durable timers that each fire a normal A2A task on a route
//! (the same store, trace, metrics and push as a client's task). Made,
//! listed, removed, paused and resumed here for the control API; a
//! capsule's own from its manifest (`manifest.rs`); one loop fires the
//! ticks that are due. A tick fires once across restarts and `kill -9`: it
//! is recorded in the commit that records its task, whose `messageId` it
//! names (so a second attempt finds the first's task).

pub mod manifest;
pub mod model;

use std::sync::Arc;
use std::time::Duration;

use roost_wire::api::{ScheduleInfo, ScheduleRequest};
use serde_json::json;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::store::{Store, StoreError, now_ms};
use crate::supervisor::Routes;
use crate::tasks::{Broker, NewTask, SubmitError};
use model::{Missed, Origin, Overlap, Schedule, TimesError, When, check_name, check_text, rfc3339};

/// The loop looks at the wall clock at least this often (it may be set).
const MAX_SLEEP: Duration = Duration::from_secs(30);

/// Why a schedule call did nothing; each says what to fix.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    #[error(transparent)]
    Times(#[from] TimesError),
    #[error(
        "no running session serves route '{0}' on this roostd: start it first (roostctl list \
         shows the routes)"
    )]
    NoRoute(String),
    #[error("route '{route}' already has a schedule named '{name}': pick another --name, or rm it")]
    NameTaken { route: String, name: String },
    #[error("no schedule '{0}' (roostctl schedule list shows their ids)")]
    NotFound(String),
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Schedules, and the loop that fires them.
pub struct Schedules {
    store: Store,
    broker: Arc<Broker>,
    routes: Arc<Routes>,
    /// Poked when a schedule is made, changed or removed.
    changed: Arc<Notify>,
    /// When this roostd began: a tick due before it came due while roostd
    /// was down (`missed`).
    started_ms: i64,
}

impl Schedules {
    pub fn new(
        store: Store,
        broker: Arc<Broker>,
        routes: Arc<Routes>,
        changed: Arc<Notify>,
    ) -> Self {
        Self {
            store,
            broker,
            routes,
            changed,
            started_ms: now_ms(),
        }
    }

    /// Makes a schedule for a route that runs here.
    pub async fn add(&self, req: ScheduleRequest) -> Result<ScheduleInfo, ScheduleError> {
        let now = now_ms();
        When::parse_new(&req.times, now)?;
        check_text(&req.text, req.context_id.as_deref()).map_err(ScheduleError::Invalid)?;
        let route = self
            .routes
            .get(&req.route)
            .filter(|r| r.live && r.node.is_none())
            .ok_or_else(|| ScheduleError::NoRoute(req.route.clone()))?;
        let id = format!("sch_{}", uuid::Uuid::now_v7().simple());
        let name = req.name.clone().unwrap_or_else(|| id.clone());
        check_name(&name).map_err(ScheduleError::Invalid)?;
        let schedule = Schedule {
            id,
            route: route.name,
            name,
            origin: Origin::Api,
            text: req.text,
            context_id: req.context_id,
            times: req.times,
            missed: req.missed.unwrap_or_default(),
            overlap: req.overlap.unwrap_or_default(),
            paused: false,
            created_ms: now,
            last_tick_ms: None,
            last_task_id: None,
            fired: 0,
            skipped: 0,
            last_error: None,
        };
        if !self.store.add_schedule(&schedule).await? {
            return Err(ScheduleError::NameTaken {
                route: schedule.route,
                name: schedule.name,
            });
        }
        tracing::info!(schedule = %schedule.id, route = %schedule.route, name = %schedule.name, "schedule made");
        self.changed.notify_one();
        Ok(info(&schedule, now))
    }

    /// Schedules, of one route or all.
    pub async fn list(&self, route: Option<&str>) -> Result<Vec<ScheduleInfo>, ScheduleError> {
        let now = now_ms();
        let route = route.map(|r| self.routes.get(r).map_or(r.to_string(), |r| r.name));
        let all = self.store.schedules(route.as_deref()).await?;
        Ok(all.iter().map(|s| info(s, now)).collect())
    }

    pub async fn get(&self, id: &str) -> Result<ScheduleInfo, ScheduleError> {
        let s = self.one(id).await?;
        Ok(info(&s, now_ms()))
    }

    async fn one(&self, id: &str) -> Result<Schedule, ScheduleError> {
        self.store
            .schedule(id)
            .await?
            .ok_or_else(|| ScheduleError::NotFound(id.to_string()))
    }

    pub async fn remove(&self, id: &str) -> Result<ScheduleInfo, ScheduleError> {
        let s = self.one(id).await?;
        if !self.store.remove_schedule(id).await? {
            return Err(ScheduleError::NotFound(id.to_string()));
        }
        tracing::info!(schedule = %id, route = %s.route, "schedule removed");
        self.changed.notify_one();
        Ok(info(&s, now_ms()))
    }

    /// Pauses, or resumes: ticks that fall while it is paused are passed
    /// over (the next task is the first tick after the resume).
    pub async fn set_paused(&self, id: &str, paused: bool) -> Result<ScheduleInfo, ScheduleError> {
        if !self.store.pause_schedule(id, paused, now_ms()).await? {
            return Err(ScheduleError::NotFound(id.to_string()));
        }
        tracing::info!(schedule = %id, paused, "schedule paused or resumed");
        self.changed.notify_one();
        self.get(id).await
    }

    /// Fires due ticks until `stop`.
    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        loop {
            let next = match self.fire_due().await {
                Ok(next) => next,
                Err(error) => {
                    tracing::warn!(%error, "cannot read the schedules; trying again shortly");
                    Some(now_ms() + 1000)
                }
            };
            let wait = next.map_or(MAX_SLEEP, |at| {
                Duration::from_millis(u64::try_from(at - now_ms()).unwrap_or(0)).min(MAX_SLEEP)
            });
            tokio::select! {
                () = stop.cancelled() => return,
                () = self.changed.notified() => {}
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// Fires each schedule's latest due tick; answers when the next falls.
    async fn fire_due(&self) -> Result<Option<i64>, StoreError> {
        let now = now_ms();
        let mut soonest: Option<i64> = None;
        for s in self.store.schedules(None).await? {
            if s.paused {
                continue;
            }
            let Some(when) = s.when() else {
                continue;
            };
            let mut cursor = s.cursor_ms();
            // Ticks missed while the loop was away collapse into their
            // latest: one task, not a burst.
            if let Some(tick) = when.latest_in(cursor, now) {
                self.fire(&s, tick).await;
                cursor = tick;
            }
            if let Some(next) = when.next_after(cursor.max(now)) {
                soonest = Some(soonest.map_or(next, |s| s.min(next)));
            }
        }
        Ok(soonest)
    }

    /// One tick of one schedule: its task, or why it was passed over.
    async fn fire(&self, s: &Schedule, tick: i64) {
        let passed = |why: String| async move {
            tracing::info!(schedule = %s.id, route = %s.route, tick = %rfc3339(tick), reason = %why,
                "a schedule's tick passed over");
            if let Err(error) = self.store.pass_tick(&s.id, tick, &why).await {
                tracing::warn!(%error, schedule = %s.id, "cannot record a passed tick");
            }
        };
        if tick < self.started_ms && s.missed == Missed::Skip {
            return passed("missed while roostd was down (missed: skip)".into()).await;
        }
        let Some(route) = self
            .routes
            .get(&s.route)
            .filter(|r| r.live && r.node.is_none())
        else {
            return passed(format!("route '{}' is not running on this roostd", s.route)).await;
        };
        if s.overlap == Overlap::Skip
            && let Some(previous) = &s.last_task_id
            && let Ok(Some(task)) = self.broker.task(&previous.as_str().into()).await
            && !task.state.is_terminal()
        {
            return passed(format!(
                "its previous task {previous} has not ended (overlap: skip)"
            ))
            .await;
        }
        let message_id = s.message_id(tick);
        let mut message = json!({
            "messageId": message_id, "role": "ROLE_USER", "parts": [{"text": s.text}],
            "metadata": {"roost/schedule": {"id": s.id, "name": s.name, "tick": rfc3339(tick)}},
        });
        if let Some(context) = &s.context_id {
            message["contextId"] = json!(context);
        }
        let submitted = self
            .broker
            .submit(NewTask {
                session_id: &route.id,
                route: &route.name,
                // The route's own owner, as a capsule of this roostd.
                owner: "",
                message_id: &message_id,
                context_id: s.context_id.as_deref(),
                text: &s.text,
                message_json: &message.to_string(),
                parts: message["parts"].as_array().map_or(&[], Vec::as_slice),
                traceparent: None,
                dedupe: true,
                tick: Some((&s.id, tick)),
            })
            .await;
        match submitted {
            Ok((task, _)) => {
                tracing::info!(schedule = %s.id, route = %route.name, task_id = %task.id,
                    tick = %rfc3339(tick), "a schedule fired");
            }
            // It may yet be recorded, with its tick.
            Err(error @ SubmitError::Unknown { .. }) => {
                tracing::warn!(%error, schedule = %s.id, "a schedule's task is not confirmed yet");
            }
            Err(error) => passed(error.to_string()).await,
        }
    }
}

/// A schedule as the API shows it: when it fires next (none while paused
/// or once an `at` has fired).
pub fn info(s: &Schedule, now_ms: i64) -> ScheduleInfo {
    let next = (!s.paused).then(|| s.when()).flatten().and_then(|w| {
        w.latest_in(s.cursor_ms(), now_ms)
            .or_else(|| w.next_after(s.cursor_ms().max(now_ms)))
    });
    ScheduleInfo {
        id: s.id.clone(),
        route: s.route.clone(),
        name: s.name.clone(),
        origin: s.origin.as_str().to_string(),
        text: s.text.clone(),
        context_id: s.context_id.clone(),
        times: s.times.clone(),
        missed: s.missed,
        overlap: s.overlap,
        paused: s.paused,
        created_at: rfc3339(s.created_ms),
        next_tick: next.map(rfc3339),
        last_tick: s.last_tick_ms.map(rfc3339),
        last_task_id: s.last_task_id.clone(),
        fired: s.fired,
        skipped: s.skipped,
        last_error: s.last_error.clone(),
    }
}
