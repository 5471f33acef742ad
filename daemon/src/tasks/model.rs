//! What an A2A task is, apart from any wire format and from how it is
//! delivered: its states, the entries of its event log, the stored record.
//! The store depends on this file alone.

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
    /// A state change, with an optional message from the agent.
    Status {
        state: TaskState,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
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
    /// The agent answered with a message instead of a task result.
    Reply { text: String },
    /// A follow-up message from the client (the answer to an input request).
    Input { message_id: String, text: String },
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
    pub answer: Option<String>,
    pub created_at: String,
    pub updated_at: String,
}

/// The text of a stored message: its text parts, joined by blank lines.
pub fn message_text(message: &serde_json::Value) -> String {
    message["parts"]
        .as_array()
        .map(|parts| {
            parts
                .iter()
                .filter_map(|p| p["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n\n")
        })
        .unwrap_or_default()
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
