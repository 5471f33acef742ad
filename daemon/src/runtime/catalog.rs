//! What the host interfaces need from their owners, as traits the runtime
//! defines: of a session's artifacts (`Catalog`, implemented by `artifacts`;
//! the runtime knows no registry, bundle or lock file) what `invoke` runs for
//! a name, and the artifact manager's list, describe, search, pull and
//! remove; of its native and shell tools (`Processes`, implemented by
//! `tools`; the runtime knows no process or jail) how to run one. The tool
//! call's input and result on the host side are here too.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use roost_wire::artifact::ArtifactRuntime;

use super::{GuestFailure, PreparedTool, RuntimeError};
use crate::policy::CapabilityPolicy;

/// An error of a port's implementation (a tool process, the session's
/// artifacts), typed on the owner's side; the guest reads its text.
pub type PortError = Box<dyn std::error::Error + Send + Sync>;

/// Why a tool call produced no tool result.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error("tool '{0}' is not declared in manifest allowlist")]
    NotAllowed(String),
    #[error("tool '{0}': tools and hooks cannot invoke other tools")]
    Nested(String),
    #[error("'{name}' is a {runtime} artifact, not a tool; it cannot be invoked")]
    NotATool {
        name: String,
        runtime: ArtifactRuntime,
    },
    #[error(
        "tool '{0}' is allow-listed but not installed in this session: declare it under \
         `artifacts:`, pull it with the artifact manager, or add it to capabilities.shell.allow"
    )]
    NotInstalled(String),
    /// A WASM tool (or driver) trapped, ran out of time or memory.
    #[error("{what} failed: {failure}")]
    Guest { what: String, failure: GuestFailure },
    /// A native or shell tool's process could not run.
    #[error(transparent)]
    Process(PortError),
}

/// Why an artifact-manager call failed.
#[derive(Debug, thiserror::Error)]
pub enum ManageError {
    #[error("the artifact manager is available to capsules only, not to tools or hooks")]
    NotForTools,
    #[error(transparent)]
    Catalog(PortError),
}

/// What a tool is asked (`murmur:tool/run` `tool-input`).
#[derive(Debug, Clone, Default)]
pub struct ToolRequest {
    pub data: Option<String>,
    pub log_path: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolStatus {
    Passed,
    Failed,
    Error,
}

/// What a tool answered (`murmur:tool/run` `tool-result`).
#[derive(Debug, Clone)]
pub struct ToolOutput {
    pub status: ToolStatus,
    pub summary: Option<String>,
    pub data: Option<String>,
    pub data_path: Option<String>,
    pub truncated: bool,
    pub metadata: Vec<(String, String)>,
}

/// Runs a session's native and shell tools (processes, in the jail).
#[async_trait::async_trait]
pub trait Processes: Send + Sync {
    /// The native tool `name`, installed at `binary`.
    async fn native(
        &self,
        name: &str,
        binary: &Path,
        request: ToolRequest,
    ) -> Result<ToolOutput, PortError>;
    /// The allow-listed shell binary `name`.
    async fn shell(&self, name: &str, request: ToolRequest) -> Result<ToolOutput, PortError>;
}

/// What `invoke` should run for a name.
pub enum Target {
    Wasm(Arc<PreparedTool>),
    Native(PathBuf),
    Skill(Arc<str>),
    Shell,
    NotATool(ArtifactRuntime),
    Missing,
}

/// `manage` list entries.
pub struct Summary {
    pub name: String,
    pub version: String,
    pub native: bool,
}

/// `manage.describe`.
pub struct Info {
    pub name: String,
    pub version: String,
    pub description: String,
    pub tags: Vec<String>,
    pub native: bool,
    pub input_schema: Option<String>,
    pub output_schema: Option<String>,
}

/// Compiles a pulled tool's component on the shared Engine.
#[async_trait::async_trait]
pub trait Compiler: Send + Sync {
    async fn compile_tool(
        &self,
        what: &str,
        bytes: Vec<u8>,
    ) -> Result<Arc<PreparedTool>, RuntimeError>;
}

/// One session's artifacts. Errors are the guest's to read (the WIT's
/// `result<_, string>` carries their text).
#[async_trait::async_trait]
pub trait Catalog: Send + Sync {
    fn target(&self, name: &str, policy: &CapabilityPolicy) -> Target;
    fn list(&self, policy: &CapabilityPolicy) -> Vec<Summary>;
    fn describe(&self, name: &str, policy: &CapabilityPolicy) -> Result<Info, PortError>;
    async fn search(&self, query: &str) -> Result<Vec<Summary>, PortError>;
    /// Fetches, verifies, compiles (through `compiler`) and installs an
    /// artifact, pinning it in the lock.
    async fn pull(
        &self,
        name: &str,
        version: &str,
        compiler: &dyn Compiler,
    ) -> Result<Summary, PortError>;
    async fn remove(&self, name: &str) -> Result<bool, PortError>;
    /// `manage.diagnostics`' capabilities, as JSON.
    fn capabilities_json(
        &self,
        policy: &CapabilityPolicy,
        allowlist: &std::collections::HashSet<String>,
    ) -> String;
}
