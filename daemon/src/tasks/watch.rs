//! What the broker tells metrics and traces about the tasks it accepted in
//! this process: each task's span (from acceptance to its final state, the
//! parent of everything its run does), its queue wait as a span of its own,
//! and the per-route counters and latencies.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::metrics::Metrics;
use crate::telemetry::{Kind, Span};

use super::{TaskState, lock, trace_id_of};

struct Tracked {
    route: String,
    accepted: Instant,
    span: Span,
    /// Until the session takes the task.
    wait: Option<Span>,
}

pub(super) struct Watch {
    metrics: Arc<Metrics>,
    tracked: Mutex<HashMap<String, Tracked>>,
}

/// Who the task is, for its span.
pub(super) struct Accepted<'a> {
    pub task_id: &'a str,
    pub route: &'a str,
    pub session_id: &'a str,
    pub context_id: &'a str,
    /// The `traceparent` the client sent.
    pub traceparent: Option<&'a str>,
}

impl Watch {
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Self {
            metrics,
            tracked: Mutex::default(),
        }
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The task was recorded. Returns the `traceparent` its run continues:
    /// its own span's while telemetry is on, else the client's.
    pub fn accepted(&self, a: &Accepted<'_>) -> Option<String> {
        self.metrics
            .task_state(a.route, TaskState::Submitted.as_str());
        let mut span = Span::root_in(
            format!("a2a task {}", a.route),
            Kind::Server,
            a.traceparent,
            &trace_id_of(a.task_id),
        );
        span.set("a2a.task.id", a.task_id);
        span.set("a2a.context.id", a.context_id);
        span.set("roost.route", a.route);
        span.set("roost.session_id", a.session_id);
        let traceparent = span.traceparent();
        let wait = traceparent
            .as_deref()
            .map(|parent| Span::start("queue wait", Kind::Internal, Some(parent)));
        lock(&self.tracked).insert(
            a.task_id.to_string(),
            Tracked {
                route: a.route.to_string(),
                accepted: Instant::now(),
                span,
                wait,
            },
        );
        traceparent.or_else(|| a.traceparent.map(str::to_string))
    }

    /// Its session took it.
    pub fn taken(&self, task_id: &str) {
        let mut tracked = lock(&self.tracked);
        let Some(t) = tracked.get_mut(task_id) else {
            return;
        };
        if let Some(wait) = t.wait.take() {
            wait.end();
        }
        self.metrics.task_waited(&t.route, t.accepted.elapsed());
    }

    /// It reached a final state.
    pub fn ended(&self, task_id: &str, state: TaskState, message: Option<&str>) {
        let Some(mut t) = lock(&self.tracked).remove(task_id) else {
            return;
        };
        self.metrics.task_state(&t.route, state.as_str());
        self.metrics.task_ended(&t.route, t.accepted.elapsed());
        t.span.set("a2a.task.state", state.as_str());
        if state != TaskState::Completed {
            t.span.fail(format!(
                "{}: {}",
                state.as_str(),
                message.unwrap_or("no message")
            ));
        }
    }
}
