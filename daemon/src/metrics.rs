//! Process metrics and their exposition (`GET /metrics`): the only module
//! that names `prometheus-client`. Series are `roost_*` (plus the standard
//! `process_*`), labelled by route, capsule, model or a small fixed set,
//! never by a task or session id.

use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelSet, NoLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;

mod process;

/// How a guest run ended, for the outcome counter.
#[derive(Debug, Clone, Copy)]
pub enum SessionOutcome {
    Completed,
    Failed,
    Stopped,
    Interrupted,
}

impl SessionOutcome {
    fn label(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Stopped => "stopped",
            Self::Interrupted => "interrupted",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Tier {
    tier: &'static str,
}
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Outcome {
    outcome: &'static str,
}
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Route {
    route: String,
}
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteState {
    route: String,
    state: &'static str,
}
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolKind {
    capsule: String,
    kind: &'static str,
}
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolStatus {
    capsule: String,
    kind: &'static str,
    status: &'static str,
}
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Model {
    capsule: String,
    model: String,
}
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Tokens {
    capsule: String,
    model: String,
    /// `input` or `output`.
    direction: &'static str,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// Seconds, 5 ms to ~5.8 min.
fn latency() -> Histogram {
    Histogram::new(exponential_buckets(0.005, 2.5, 13))
}

/// Counters, gauges and histograms updated from anywhere; rendered by
/// [`Metrics::render`].
pub struct Metrics {
    registry: Registry,
    sessions_started: Counter,
    sessions_restarted: Counter,
    components_compiled: Counter,
    cache_hits: Family<Tier, Counter>,
    outcomes: Family<Outcome, Counter>,
    api_requests: Counter,
    live_sessions: Gauge,
    uptime: Gauge,
    tasks: Family<RouteState, Counter>,
    queue_depth: Family<Route, Gauge>,
    task_duration: Histograms<Route>,
    queue_wait: Histograms<Route>,
    tool_calls: Family<ToolStatus, Counter>,
    tool_duration: Histograms<ToolKind>,
    tokens: Family<Tokens, Counter>,
    inference_errors: Family<Model, Counter>,
    inference_duration: Histograms<Model>,
    wakes: Counter,
    wake_duration: Histogram,
    hibernated: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut root = Registry::default();
        root.register_collector(Box::new(process::Process::new()));
        let mut m = Self {
            registry: Registry::default(),
            sessions_started: Counter::default(),
            sessions_restarted: Counter::default(),
            components_compiled: Counter::default(),
            cache_hits: Family::default(),
            outcomes: Family::default(),
            api_requests: Counter::default(),
            live_sessions: Gauge::default(),
            uptime: Gauge::default(),
            tasks: Family::default(),
            queue_depth: Family::default(),
            task_duration: Family::new_with_constructor(latency),
            queue_wait: Family::new_with_constructor(latency),
            tool_calls: Family::default(),
            tool_duration: Family::new_with_constructor(latency),
            tokens: Family::default(),
            inference_errors: Family::default(),
            inference_duration: Family::new_with_constructor(latency),
            wakes: Counter::default(),
            wake_duration: Histogram::new(exponential_buckets(0.0005, 2.0, 14)),
            hibernated: Gauge::default(),
        };
        let r = root.sub_registry_with_prefix("roost");
        r.register(
            "build",
            "roostd's version",
            Info::new(vec![("version", env!("CARGO_PKG_VERSION"))]),
        );
        r.register(
            "sessions_started",
            "Guest runs started (first runs and restarts)",
            m.sessions_started.clone(),
        );
        r.register(
            "sessions_restarted",
            "Guest runs started again by supervision",
            m.sessions_restarted.clone(),
        );
        r.register(
            "components_compiled",
            "Components compiled by cranelift (cache misses)",
            m.components_compiled.clone(),
        );
        r.register(
            "component_cache_hits",
            "Prepared components found in the cache, by tier (memory, disk)",
            m.cache_hits.clone(),
        );
        r.register(
            "session_outcomes",
            "Guest runs by how they ended",
            m.outcomes.clone(),
        );
        r.register(
            "api_requests",
            "Control API requests served",
            m.api_requests.clone(),
        );
        r.register(
            "live_sessions",
            "Sessions starting or running",
            m.live_sessions.clone(),
        );
        r.register(
            "uptime_seconds",
            "Seconds since roostd started",
            m.uptime.clone(),
        );
        r.register(
            "a2a_tasks",
            "A2A tasks by route and the state they reached (submitted when accepted, then \
             their final state)",
            m.tasks.clone(),
        );
        r.register(
            "a2a_queue_depth",
            "A2A tasks waiting for their session, by route",
            m.queue_depth.clone(),
        );
        r.register(
            "a2a_task_duration_seconds",
            "A2A tasks from acceptance to their final state, by route",
            m.task_duration.clone(),
        );
        r.register(
            "a2a_task_queue_wait_seconds",
            "A2A tasks from acceptance to their session taking them, by route",
            m.queue_wait.clone(),
        );
        r.register(
            "tool_calls",
            "An agent's tool calls by capsule, tool kind and status",
            m.tool_calls.clone(),
        );
        r.register(
            "tool_call_duration_seconds",
            "An agent's tool calls by capsule and tool kind",
            m.tool_duration.clone(),
        );
        r.register(
            "inference_tokens",
            "Model tokens by capsule, model and direction (input, output)",
            m.tokens.clone(),
        );
        r.register(
            "inference_errors",
            "Model calls that failed, by capsule and model",
            m.inference_errors.clone(),
        );
        r.register(
            "inference_duration_seconds",
            "Model calls by capsule and model",
            m.inference_duration.clone(),
        );
        r.register(
            "wakes",
            "Hibernated sessions woken by a task",
            m.wakes.clone(),
        );
        r.register(
            "wake_duration_seconds",
            "From a hibernated session's first task arriving to the woken session taking it",
            m.wake_duration.clone(),
        );
        r.register(
            "hibernated_sessions",
            "Sessions hibernated (lifecycle.hibernate_after): their routes open, nothing running",
            m.hibernated.clone(),
        );
        m.registry = root;
        // Fixed label sets show from the start (at 0).
        for tier in ["memory", "disk"] {
            m.cache_hits.get_or_create(&Tier { tier }).inc_by(0);
        }
        for outcome in [
            SessionOutcome::Completed,
            SessionOutcome::Failed,
            SessionOutcome::Stopped,
            SessionOutcome::Interrupted,
        ] {
            m.outcomes
                .get_or_create(&Outcome {
                    outcome: outcome.label(),
                })
                .inc_by(0);
        }
        m
    }

    pub fn session_started(&self) {
        self.sessions_started.inc();
    }
    pub fn session_restarted(&self) {
        self.sessions_restarted.inc();
    }
    pub fn compiled(&self) {
        self.components_compiled.inc();
    }
    pub fn cache_hit_memory(&self) {
        self.cache_hits
            .get_or_create(&Tier { tier: "memory" })
            .inc();
    }
    pub fn cache_hit_disk(&self) {
        self.cache_hits.get_or_create(&Tier { tier: "disk" }).inc();
    }
    pub fn outcome(&self, outcome: SessionOutcome) {
        self.outcomes
            .get_or_create(&Outcome {
                outcome: outcome.label(),
            })
            .inc();
    }
    pub fn api_request(&self) {
        self.api_requests.inc();
    }
    /// A hibernated session took its first task, `took` after it arrived.
    pub fn woke(&self, took: Duration) {
        self.wakes.inc();
        self.wake_duration.observe(took.as_secs_f64());
    }
    pub fn set_hibernated(&self, n: usize) {
        self.hibernated.set(i64::try_from(n).unwrap_or(i64::MAX));
    }
    pub fn components_compiled(&self) -> u64 {
        self.components_compiled.get()
    }

    /// A task reached `state` (`submitted` on acceptance).
    pub fn task_state(&self, route: &str, state: &'static str) {
        self.tasks
            .get_or_create(&RouteState {
                route: route.to_string(),
                state,
            })
            .inc();
    }
    pub fn task_ended(&self, route: &str, took: Duration) {
        self.task_duration
            .get_or_create(&Route {
                route: route.to_string(),
            })
            .observe(took.as_secs_f64());
    }
    pub fn task_waited(&self, route: &str, waited: Duration) {
        self.queue_wait
            .get_or_create(&Route {
                route: route.to_string(),
            })
            .observe(waited.as_secs_f64());
    }
    pub fn tool_call(
        &self,
        capsule: &str,
        kind: &'static str,
        status: &'static str,
        took: Duration,
    ) {
        let capsule = capsule.to_string();
        self.tool_duration
            .get_or_create(&ToolKind {
                capsule: capsule.clone(),
                kind,
            })
            .observe(took.as_secs_f64());
        self.tool_calls
            .get_or_create(&ToolStatus {
                capsule,
                kind,
                status,
            })
            .inc();
    }
    /// A model call ended: its tokens (none when it failed) and how long it took.
    pub fn inference(
        &self,
        capsule: &str,
        model: &str,
        tokens: Option<(u64, u64)>,
        took: Duration,
    ) {
        let labels = Model {
            capsule: capsule.to_string(),
            model: model.to_string(),
        };
        self.inference_duration
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
        let Some((input, output)) = tokens else {
            self.inference_errors.get_or_create(&labels).inc();
            return;
        };
        for (direction, n) in [("input", input), ("output", output)] {
            self.tokens
                .get_or_create(&Tokens {
                    capsule: labels.capsule.clone(),
                    model: labels.model.clone(),
                    direction,
                })
                .inc_by(n);
        }
    }

    /// The exposition (OpenMetrics text, which Prometheus reads), with the
    /// gauges read at scrape time: live sessions, uptime, and each route's
    /// waiting tasks.
    pub fn render(
        &self,
        live_sessions: u64,
        uptime_secs: u64,
        queued: &[(String, usize)],
    ) -> String {
        self.live_sessions
            .set(i64::try_from(live_sessions).unwrap_or(i64::MAX));
        self.uptime
            .set(i64::try_from(uptime_secs).unwrap_or(i64::MAX));
        self.queue_depth.clear();
        for (route, n) in queued {
            self.queue_depth
                .get_or_create(&Route {
                    route: route.clone(),
                })
                .set(i64::try_from(*n).unwrap_or(i64::MAX));
        }
        let mut out = String::new();
        if let Err(error) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::warn!(%error, "cannot encode the metrics");
        }
        out
    }
}

/// The exposition's content type.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// For the process collector's exemplar-free counters.
type NoExemplar = Option<&'static prometheus_client::metrics::exemplar::Exemplar<NoLabelSet, f64>>;

#[cfg(test)]
mod tests {
    use super::*;

    /// Every series, each with one sample.
    fn exposition() -> String {
        let m = Metrics::new();
        m.session_started();
        m.session_restarted();
        m.compiled();
        m.cache_hit_disk();
        m.outcome(SessionOutcome::Failed);
        m.api_request();
        m.task_state("r", "submitted");
        m.task_waited("r", Duration::from_millis(3));
        m.task_ended("r", Duration::from_millis(30));
        m.tool_call("c", "wasm", "passed", Duration::from_millis(2));
        m.inference("c", "m", Some((10, 2)), Duration::from_millis(40));
        m.inference("c", "m", None, Duration::from_millis(40));
        m.render(1, 5, &[("r".into(), 2)])
    }

    fn sample_names(text: &str) -> std::collections::HashSet<String> {
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.split(['{', ' ']).next())
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn the_shipped_grafana_dashboard_names_only_series_roostd_serves() {
        let served = sample_names(&exposition());
        let dashboard = include_str!("../../contrib/grafana/roostd.json");
        let json: serde_json::Value = serde_json::from_str(dashboard).expect("dashboard JSON");
        let mut named = 0;
        for word in dashboard.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            if word.starts_with("roost_") || word.starts_with("process_") {
                named += 1;
                assert!(
                    served.contains(word),
                    "the dashboard names {word}, not served"
                );
            }
        }
        assert!(named > 15, "{named}");
        assert!(json["panels"].as_array().is_some_and(|p| p.len() > 10));
    }

    #[test]
    fn labels_are_bounded_and_units_are_base_units() {
        let text = exposition();
        assert!(
            text.contains("roost_a2a_queue_depth{route=\"r\"} 2"),
            "{text}"
        );
        assert!(
            text.contains(
                "roost_inference_tokens_total{capsule=\"c\",model=\"m\",direction=\"input\"} 10"
            ),
            "{text}"
        );
        assert!(
            text.contains("roost_inference_errors_total{capsule=\"c\",model=\"m\"} 1"),
            "{text}"
        );
        assert!(text.contains("roost_build_info{version=\""), "{text}");
        assert!(text.ends_with("# EOF\n"), "OpenMetrics");
        for line in text.lines().filter(|l| l.starts_with("# TYPE")) {
            let name = line.split(' ').nth(2).unwrap_or_default();
            assert!(
                name.starts_with("roost_") || name.starts_with("process_"),
                "{line}"
            );
            assert!(
                !name.contains("_ms") && !name.contains("milli"),
                "base units: {line}"
            );
        }
    }
}
