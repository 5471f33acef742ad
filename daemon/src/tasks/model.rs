//! What an A2A task is, apart from any wire format and from how it is
//! delivered: its states, the entries of its event log, the stored record,
//! a new one, which ones a list wants, and where its updates are pushed.
//! What the task log (`tasks::log`) takes and gives; the store depends on
//! this file alone.

use crate::ids::{SessionId, TaskId};
use serde::{Deserialize, Serialize};

/// Where a task is (stored as the 0.3 spelling).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TaskState {
    Submitted,
    Working,
    InputRequired,
    Completed,
    Failed,
    Canceled,
    Rejected,
}

impl TaskState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Submitted => "submitted",
            Self::Working => "working",
            Self::InputRequired => "input-required",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Canceled => "canceled",
            Self::Rejected => "rejected",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "submitted" => Self::Submitted,
            "working" => Self::Working,
            "input-required" => Self::InputRequired,
            "completed" => Self::Completed,
            "failed" => Self::Failed,
            "canceled" => Self::Canceled,
            "rejected" => Self::Rejected,
            _ => return None,
        })
    }

    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Self::Completed | Self::Failed | Self::Canceled | Self::Rejected
        )
    }
}

/// What happened to a task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EventKind {
    /// A state change, with an optional message from the agent: its text
    /// (`message`), and, when the agent gave more than text
    /// (`murmur:a2a@0.2.0`), its parts as 1.0 Part objects.
    Status {
        state: TaskState,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        parts: Option<Vec<serde_json::Value>>,
    },
    /// A part of one of the task's artifacts (`answer`: the answer, whole or
    /// in chunks): text, or `part`, a 1.0 Part object (data or file).
    Artifact {
        artifact_id: String,
        text: String,
        #[serde(default)]
        append: bool,
        #[serde(default)]
        last_chunk: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        part: Option<serde_json::Value>,
    },
    /// The agent answered with a message instead of a task result: its
    /// text, and its parts when it gave more than text.
    Reply {
        text: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        parts: Option<Vec<serde_json::Value>>,
    },
    /// A follow-up message from the client (the answer to an input request),
    /// with its parts (1.0 Part objects; absent in logs written before they
    /// were kept).
    Input {
        message_id: String,
        text: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        parts: Option<Vec<serde_json::Value>>,
    },
}

/// One entry of a task's event log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskEvent {
    pub seq: u64,
    pub at: String,
    pub kind: EventKind,
}

/// A task as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct A2aTask {
    pub id: TaskId,
    pub context_id: String,
    pub session_id: SessionId,
    pub route: String,
    /// The client that sent it ('' for a route's one token): only it reads
    /// the task (issue 32).
    pub owner: String,
    pub state: TaskState,
    /// The text of the message that created it.
    pub text: String,
    pub message_id: String,
    /// The last status message, if the agent gave one.
    pub status_message: Option<String>,
    /// Its parts, when the agent gave more than text.
    pub status_parts: Option<Vec<serde_json::Value>>,
    /// The parts of the message that created it (1.0 Part objects).
    pub parts: Vec<serde_json::Value>,
    pub answer: Option<String>,
    pub created_at: String,
    pub updated_at: String,
}

/// The text of a stored message: its parts as text (see `parts_text`).
pub fn message_text(message: &serde_json::Value) -> String {
    message["parts"]
        .as_array()
        .map(|parts| parts_text(parts))
        .unwrap_or_default()
}

/// 1.0 Part objects as one text, for whoever reads text only: text as is,
/// data as JSON, a file named (by URL, or name, type and size), joined by
/// blank lines.
pub fn parts_text(parts: &[serde_json::Value]) -> String {
    parts
        .iter()
        .filter_map(part_text)
        .collect::<Vec<_>>()
        .join("\n\n")
}

fn part_text(part: &serde_json::Value) -> Option<String> {
    let name = part["filename"].as_str();
    let media = part["mediaType"].as_str();
    if let Some(text) = part["text"].as_str() {
        Some(text.to_string())
    } else if let Some(data) = part.get("data") {
        Some(data.to_string())
    } else if let Some(url) = part["url"].as_str() {
        Some(format!("[file {url}]"))
    } else {
        part["raw"].as_str().map(|raw| {
            format!(
                "[file {} ({}), {} base64 characters]",
                name.unwrap_or("unnamed"),
                media.unwrap_or("unknown type"),
                raw.len()
            )
        })
    }
}

/// The stored parts of a message (1.0 Part objects).
pub fn message_parts(message: &serde_json::Value) -> Vec<serde_json::Value> {
    message["parts"].as_array().cloned().unwrap_or_default()
}

/// Largest task text a session is started with (a start request's `task`,
/// `task.md`).
pub const MAX_TASK_BYTES: usize = 1024 * 1024;

/// Why a task accepted for a session that ended was failed.
pub const NEVER_RAN: &str = "the session ended before the task ran";

/// The artifact every completed task has: its answer.
pub const ANSWER_ARTIFACT: &str = "answer";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_round_trip_and_know_when_they_end() {
        for s in [
            TaskState::Submitted,
            TaskState::Working,
            TaskState::InputRequired,
            TaskState::Completed,
            TaskState::Failed,
            TaskState::Canceled,
            TaskState::Rejected,
        ] {
            assert_eq!(TaskState::parse(s.as_str()), Some(s));
        }
        assert!(TaskState::Canceled.is_terminal());
        assert!(!TaskState::InputRequired.is_terminal());
        assert_eq!(TaskState::parse("nope"), None);
    }
}

/// A new A2A task (state `submitted`) and the message that created it.
pub struct NewA2aTask<'a> {
    pub id: &'a str,
    pub session_id: &'a str,
    pub route: &'a str,
    /// The client that sent it (`a2a.routes.<name>.clients`; '' for a
    /// route's one token).
    pub owner: &'a str,
    pub context_id: &'a str,
    pub message_id: &'a str,
    pub text: &'a str,
    pub message_json: &'a str,
    /// The message's parts (`message_json`'s `parts`, already read: the
    /// task record carries them without parsing the message again).
    pub parts: &'a [serde_json::Value],
    /// The schedule tick it fires (schedule id, unix ms), recorded with it.
    pub tick: Option<(&'a str, i64)>,
}

/// Which tasks `a2a_tasks` returns.
#[derive(Debug, Default, Clone, Copy)]
pub struct TaskFilter<'a> {
    /// Tasks accepted on this route, whichever session ran them.
    pub route: Option<&'a str>,
    pub context_id: Option<&'a str>,
    pub state: Option<TaskState>,
    /// Only tasks this client sent (`None`: anyone's).
    pub owner: Option<&'a str>,
    pub limit: u32,
    pub offset: u32,
    /// The page after the task with this `(updated_at, id)` (the last of
    /// the previous page).
    pub after: Option<(&'a str, &'a str)>,
}

/// Where a task's updates go, and with what credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushConfig {
    pub task_id: TaskId,
    pub id: String,
    pub url: String,
    /// Sent as `X-A2A-Notification-Token`.
    pub token: Option<String>,
    /// Sent as `Authorization: <scheme> <credentials>`.
    pub auth_scheme: Option<String>,
    pub auth_credentials: Option<String>,
    /// What its receiver is sent: the version of the client that made it.
    pub version: PushVersion,
}

/// The A2A version a push config's receiver reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PushVersion {
    /// Each event, as 1.0's `StreamResponse`.
    #[default]
    V10,
    /// The whole task after each event, in 0.3's shape (what 0.3's SDKs
    /// send and read).
    V03,
}

impl PushVersion {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::V10 => "1.0",
            Self::V03 => "0.3",
        }
    }

    /// As stored; anything else reads as 1.0.
    pub fn parse(s: &str) -> Self {
        if s == "0.3" { Self::V03 } else { Self::V10 }
    }
}

/// What creating a push config did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushMade {
    /// Made (or replaced one of the same id).
    Made,
    /// The task is gone.
    NoTask,
    /// The task already has its limit of other configs.
    Full,
}

/// One delivery that is due: an event of a task, to one of its configs.
#[derive(Debug, Clone)]
pub struct PushDelivery {
    pub outbox_id: i64,
    pub config: PushConfig,
    pub event_seq: u64,
    /// Tries before this one.
    pub attempts: u32,
}
