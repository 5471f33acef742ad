//! `retention:`: what roostd keeps and for how long (ended tasks and
//! sessions, an agent's trace, tools' full outputs).

use serde::{Deserialize, Serialize};

/// What roostd keeps and for how long: one section for everything it
/// would otherwise grow without bound. A 0 turns that bound off.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Retention {
    /// How often ended tasks and sessions are pruned.
    pub interval_secs: u64,
    /// Ended A2A tasks with their event logs (tasks that have not ended are
    /// never deleted).
    pub tasks: KeepTasks,
    /// Ended sessions: their rows, events, agent task records and
    /// directories. A session is kept while any of its A2A tasks is, and a
    /// session roostd will bring back is never pruned.
    pub sessions: KeepSessions,
    /// An agent session's `trace.jsonl`: past `max_bytes` it is rotated to
    /// `trace.1.jsonl` (the previous one dropped).
    pub trace: KeepBytes,
    /// A session's `tool-output/` (full outputs of shell tools): past
    /// `max_bytes` the oldest files are removed.
    pub tool_output: KeepBytes,
}

impl Default for Retention {
    fn default() -> Self {
        Self {
            interval_secs: 300,
            tasks: KeepTasks::default(),
            sessions: KeepSessions::default(),
            trace: KeepBytes {
                max_bytes: 16 << 20,
            },
            tool_output: KeepBytes {
                max_bytes: 64 << 20,
            },
        }
    }
}

/// Ended A2A tasks older than `max_age_secs`, or beyond the newest
/// `max_count`, are deleted.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct KeepTasks {
    pub max_age_secs: u64,
    pub max_count: u64,
}

impl Default for KeepTasks {
    fn default() -> Self {
        Self {
            max_age_secs: 7 * 24 * 3600,
            max_count: 100_000,
        }
    }
}

/// Sessions that ended more than `max_age_secs` ago, or beyond the newest
/// `max_count` ended ones, are deleted.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct KeepSessions {
    pub max_age_secs: u64,
    pub max_count: u64,
}

impl Default for KeepSessions {
    fn default() -> Self {
        Self {
            max_age_secs: 7 * 24 * 3600,
            max_count: 1_000,
        }
    }
}

/// A size bound.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct KeepBytes {
    pub max_bytes: u64,
}
