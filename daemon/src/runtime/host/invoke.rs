//! `murmur:tool-registry/invoke`: a tool call dispatched by what the name
//! is in the session (a WASM tool, a native or shell tool's process, a
//! skill's text); names outside the `tools:` allow-list fail first.

use std::sync::Arc;
use std::time::Instant;

use super::super::bindings::{Status, ToolInput, ToolResult, murmur};
use super::super::call::call_tool;
use super::super::catalog::{Target, ToolError, ToolOutput, ToolRequest};
use super::{GuestState, SessionTools, from_wit, into_wit};
use crate::telemetry::{Kind, Span};

impl SessionTools {
    /// Dispatches one tool call; names outside the allow-list fail before
    /// dispatch. A WASM tool works on `task` (the caller's A2A task), else on
    /// the session's current one.
    pub async fn invoke(
        &self,
        name: &str,
        input: ToolInput,
        task: Option<Arc<dyn super::super::TaskIo>>,
    ) -> Result<ToolResult, ToolError> {
        if !self.allowlist.contains(name) {
            return Err(ToolError::NotAllowed(name.to_string()));
        }
        let started = Instant::now();
        let mut span = Span::start(format!("execute_tool {name}"), Kind::Internal, None);
        span.set("gen_ai.operation.name", "execute_tool");
        span.set("gen_ai.tool.name", name);
        if crate::telemetry::capture_content()
            && let Some(data) = &input.data
        {
            span.set("gen_ai.tool.call.arguments", data.as_str());
        }
        let request = ToolRequest {
            data: input.data.clone(),
            log_path: input.log_path.clone(),
        };
        let (kind, result) = match self.artifacts.target(name, &self.spec.policy) {
            Target::Wasm(tool) => (
                "wasm",
                call_tool(&self.core, &tool, name, input, &self.spec, task).await,
            ),
            Target::Native(path) => (
                "native",
                self.spec
                    .processes
                    .native(name, &path, request)
                    .await
                    .map(into_wit)
                    .map_err(ToolError::Process),
            ),
            Target::Shell => (
                "shell",
                self.spec
                    .processes
                    .shell(name, request)
                    .await
                    .map(into_wit)
                    .map_err(ToolError::Process),
            ),
            Target::Skill(text) => (
                "skill",
                Ok(ToolResult {
                    status: Status::Passed,
                    summary: Some(format!("Skill {name} guidance")),
                    data: Some(text.to_string()),
                    data_path: None,
                    truncated: false,
                    metadata: Vec::new(),
                }),
            ),
            Target::NotATool(runtime) => (
                "none",
                Err(ToolError::NotATool {
                    name: name.to_string(),
                    runtime,
                }),
            ),
            Target::Missing => ("none", Err(ToolError::NotInstalled(name.to_string()))),
        };
        let status = match &result {
            Ok(r) => match r.status {
                Status::Passed => "passed",
                Status::Failed => "failed",
                Status::Error => "error",
            },
            Err(_) => "dispatch-error",
        };
        span.set("roost.tool.kind", kind);
        span.set("roost.tool.status", status);
        if status != "passed" {
            span.fail(status);
        }
        self.core
            .cache
            .metrics()
            .tool_call(&self.spec.capsule, kind, status, started.elapsed());
        tracing::info!(
            tool = name,
            kind,
            status,
            duration_us = started.elapsed().as_micros() as u64,
            "tool call"
        );
        result
    }
}

impl SessionTools {
    /// `invoke` with plain types, for the agent loop's tool calls.
    pub async fn invoke_data(
        &self,
        name: &str,
        data: Option<String>,
    ) -> Result<ToolOutput, ToolError> {
        let input = ToolInput {
            data,
            log_path: None,
        };
        self.invoke(name, input, None).await.map(from_wit)
    }
}

impl murmur::tool_registry::invoke::Host for GuestState {
    async fn invoke(&mut self, name: String, input: ToolInput) -> Result<ToolResult, String> {
        match self.tools.clone() {
            Some(tools) => tools
                .invoke(&name, input, self.task.clone())
                .await
                .map_err(|e| e.to_string()),
            None => Err(ToolError::Nested(name).to_string()),
        }
    }
}
