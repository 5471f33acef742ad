//! Schedules on the wire: what `POST /v1/schedules` takes, what the list
//! and each call answer, and the two rules (`missed`, `overlap`) a
//! manifest's `schedules:` entries use too.

use serde::{Deserialize, Serialize};

/// What a schedule does about ticks that came due while roostd was down.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Missed {
    /// They are passed over: the next task is the next tick's.
    Skip,
    /// One task fires for them (the latest), however many there were.
    #[default]
    RunOnce,
}

impl Missed {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Skip => "skip",
            Self::RunOnce => "run_once",
        }
    }
}

impl std::str::FromStr for Missed {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "skip" => Ok(Self::Skip),
            "run_once" | "run-once" => Ok(Self::RunOnce),
            other => Err(format!(
                "unknown missed rule '{other}': use skip or run_once"
            )),
        }
    }
}

/// What a tick does while the schedule's previous task has not ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Overlap {
    /// It is passed over (logged, counted as skipped).
    #[default]
    Skip,
    /// Its task is accepted and waits behind the running one.
    Queue,
}

impl Overlap {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Skip => "skip",
            Self::Queue => "queue",
        }
    }
}

impl std::str::FromStr for Overlap {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "skip" => Ok(Self::Skip),
            "queue" => Ok(Self::Queue),
            other => Err(format!("unknown overlap rule '{other}': use skip or queue")),
        }
    }
}

/// When a schedule's ticks fall: exactly one of `cron` (with `tz`),
/// `every` or `at`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleTimes {
    /// A cron expression (5 fields, or 6 with seconds first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    /// The IANA time zone `cron` is read in (default UTC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tz: Option<String>,
    /// A period (`10m`, `1h 30m`; at least 1 s), counted from when the
    /// schedule was made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every: Option<String>,
    /// One instant, RFC 3339 (`2026-12-03T07:00:00Z`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
}

/// `POST /v1/schedules`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleRequest {
    /// The A2A route (a session's name) its tasks go to.
    pub route: String,
    /// The text of each task's message.
    pub text: String,
    #[serde(flatten)]
    pub times: ScheduleTimes,
    /// Every task in this A2A context (default: a new context each tick).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_id: Option<String>,
    /// Unique per route (default: the schedule's id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missed: Option<Missed>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlap: Option<Overlap>,
}

/// A schedule as `GET /v1/schedules` and each call answer it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ScheduleInfo {
    pub id: String,
    pub route: String,
    pub name: String,
    /// `api` (roostctl, the control API) or `manifest` (the capsule's
    /// `schedules:`, replaced when its session starts).
    pub origin: String,
    pub text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_id: Option<String>,
    #[serde(flatten)]
    pub times: ScheduleTimes,
    pub missed: Missed,
    pub overlap: Overlap,
    pub paused: bool,
    pub created_at: String,
    /// When the next task fires (none: paused, or an `at` that fired).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_tick: Option<String>,
    /// The last tick fired or passed over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_tick: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_task_id: Option<String>,
    /// Tasks fired.
    pub fired: u64,
    /// Ticks passed over (overlap, missed, or the route not taking tasks).
    pub skipped: u64,
    /// Why the last tick was passed over, if it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// `GET /v1/schedules`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ScheduleList {
    pub schedules: Vec<ScheduleInfo>,
}
