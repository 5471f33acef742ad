//! The murmur host interfaces on [`GuestState`], one file each: `invoke`
//! (tool dispatch through [`SessionTools`]), `manage` (the artifact
//! manager), `send` (outgoing A2A), `chunks` (streamed text), `io` and
//! `task` (the A2A task a call works on, input requests), `parts`
//! (`murmur:a2a@0.2.0`: every part in and out), `peer2`
//! (`murmur:peer@0.2.0`: a peer by card or endpoint, any binding).

mod chunks;
mod invoke;
mod io;
mod manage;
pub(crate) mod parts;
mod peer2;
mod send;

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::bindings::{Status, ToolResult};
use super::catalog::{Catalog, Processes, ToolOutput, ToolStatus};
use super::{Core, GuestState};
use crate::ids::SessionId;
use crate::logs::LogSink;
use crate::policy::CapabilityPolicy;

/// Limits and surroundings of every tool or hook call of one session.
#[derive(Clone)]
pub struct ToolSpec {
    pub session_id: SessionId,
    /// The capsule's name (a metrics label).
    pub capsule: String,
    /// The directory tools see (preopened as `.`, the cwd of native tools).
    pub workdir: PathBuf,
    /// The session's bookkeeping dir (installed tools, logs, tool output).
    pub bookkeeping: PathBuf,
    /// The capsule's guest environment (allow-listed and identity variables).
    pub env: Vec<(String, String)>,
    pub timeout: Duration,
    pub memory_bytes: u64,
    pub policy: Arc<CapabilityPolicy>,
    pub log: LogSink,
    pub stop: CancellationToken,
    /// Runs the session's native and shell tools (in the jail).
    pub processes: Arc<dyn Processes>,
    /// Where guests' refused requests are collected (agents trace them).
    pub notes: Option<Arc<super::Notes>>,
    /// The A2A task the session works on now, if any: tool calls made for it
    /// may ask its client for input.
    pub task: Option<super::TaskSlot>,
}

/// One session's tools: the `tools:` allow-list, its artifacts, and how to run them.
pub struct SessionTools {
    core: Arc<Core>,
    spec: ToolSpec,
    allowlist: HashSet<String>,
    artifacts: Arc<dyn Catalog>,
}

impl super::Runtime {
    /// The tool host a capsule's `invoke` and `manage` imports use.
    pub fn session_tools(
        &self,
        spec: ToolSpec,
        allowlist: HashSet<String>,
        artifacts: Arc<dyn Catalog>,
    ) -> Arc<SessionTools> {
        Arc::new(SessionTools {
            core: Arc::clone(&self.core),
            spec,
            allowlist,
            artifacts,
        })
    }
}

pub(crate) fn from_wit(result: ToolResult) -> ToolOutput {
    ToolOutput {
        status: match result.status {
            Status::Passed => ToolStatus::Passed,
            Status::Failed => ToolStatus::Failed,
            Status::Error => ToolStatus::Error,
        },
        summary: result.summary,
        data: result.data,
        data_path: result.data_path,
        truncated: result.truncated,
        metadata: result.metadata,
    }
}

fn into_wit(output: ToolOutput) -> ToolResult {
    ToolResult {
        status: match output.status {
            ToolStatus::Passed => Status::Passed,
            ToolStatus::Failed => Status::Failed,
            ToolStatus::Error => Status::Error,
        },
        summary: output.summary,
        data: output.data,
        data_path: output.data_path,
        truncated: output.truncated,
        metadata: output.metadata,
    }
}
