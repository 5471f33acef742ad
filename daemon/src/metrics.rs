//! Process counters and their Prometheus text rendering (`GET /metrics`).

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

/// Counters updated from anywhere; gauges are passed in at render time.
#[derive(Default)]
pub struct Metrics {
    sessions_started: AtomicU64,
    sessions_restarted: AtomicU64,
    components_compiled: AtomicU64,
    cache_hits_memory: AtomicU64,
    cache_hits_disk: AtomicU64,
    outcomes: [AtomicU64; 4],
    api_requests: AtomicU64,
}

/// How a guest run ended, for the outcome counter.
#[derive(Debug, Clone, Copy)]
pub enum SessionOutcome {
    Completed = 0,
    Failed = 1,
    Stopped = 2,
    Interrupted = 3,
}

const OUTCOME_LABELS: [&str; 4] = ["completed", "failed", "stopped", "interrupted"];

impl Metrics {
    pub fn session_started(&self) {
        self.sessions_started.fetch_add(1, Ordering::Relaxed);
    }
    pub fn session_restarted(&self) {
        self.sessions_restarted.fetch_add(1, Ordering::Relaxed);
    }
    pub fn compiled(&self) {
        self.components_compiled.fetch_add(1, Ordering::Relaxed);
    }
    pub fn cache_hit_memory(&self) {
        self.cache_hits_memory.fetch_add(1, Ordering::Relaxed);
    }
    pub fn cache_hit_disk(&self) {
        self.cache_hits_disk.fetch_add(1, Ordering::Relaxed);
    }
    pub fn outcome(&self, outcome: SessionOutcome) {
        self.outcomes[outcome as usize].fetch_add(1, Ordering::Relaxed);
    }
    pub fn api_request(&self) {
        self.api_requests.fetch_add(1, Ordering::Relaxed);
    }
    pub fn components_compiled(&self) -> u64 {
        self.components_compiled.load(Ordering::Relaxed)
    }

    /// Prometheus text exposition format 0.0.4.
    pub fn render(&self, live_sessions: u64, uptime_secs: u64) -> String {
        let mut out = String::new();
        let counter = |out: &mut String, name: &str, help: &str, value: u64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}"
            );
        };
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        counter(
            &mut out,
            "roost_sessions_started_total",
            "Guest runs started (first runs and restarts).",
            load(&self.sessions_started),
        );
        counter(
            &mut out,
            "roost_sessions_restarted_total",
            "Guest runs started again by supervision.",
            load(&self.sessions_restarted),
        );
        counter(
            &mut out,
            "roost_components_compiled_total",
            "Components compiled by cranelift (cache misses).",
            load(&self.components_compiled),
        );
        let _ = writeln!(
            out,
            "# HELP roost_component_cache_hits_total Prepared components found in the cache.\n# TYPE roost_component_cache_hits_total counter\nroost_component_cache_hits_total{{tier=\"memory\"}} {}\nroost_component_cache_hits_total{{tier=\"disk\"}} {}",
            load(&self.cache_hits_memory),
            load(&self.cache_hits_disk)
        );
        let _ = writeln!(
            out,
            "# HELP roost_session_outcomes_total Guest runs by how they ended.\n# TYPE roost_session_outcomes_total counter"
        );
        for (label, value) in OUTCOME_LABELS.iter().zip(&self.outcomes) {
            let _ = writeln!(
                out,
                "roost_session_outcomes_total{{outcome=\"{label}\"}} {}",
                load(value)
            );
        }
        counter(
            &mut out,
            "roost_api_requests_total",
            "Control API requests served.",
            load(&self.api_requests),
        );
        let _ = writeln!(
            out,
            "# HELP roost_live_sessions Sessions starting or running.\n# TYPE roost_live_sessions gauge\nroost_live_sessions {live_sessions}"
        );
        let _ = writeln!(
            out,
            "# HELP roost_uptime_seconds Seconds since roostd started.\n# TYPE roost_uptime_seconds gauge\nroost_uptime_seconds {uptime_secs}"
        );
        out
    }
}
