//! The turns of one task: the model's calls through the driver, the
//! tool calls it asks for (allow-list first), the token budget, and what
//! they leave in the trace.

use super::run::TaskFailure;
use super::*;
use crate::telemetry::{Kind, Span};

/// Why a task's turns could not go on.
#[derive(Debug, thiserror::Error)]
pub enum TurnError {
    #[error(
        "token budget exhausted: the session has used {used} tokens, more than \
         inference.budget.max_total_tokens ({max})"
    )]
    Budget { used: u64, max: u64 },
    #[error(
        "the model did not finish within inference.max_turns ({max}); its last turn still \
         called tools ({asked}). Raise max_turns or narrow the task"
    )]
    MaxTurns { max: u32, asked: String },
    #[error("cannot encode the driver request: {0}")]
    Encode(#[source] serde_json::Error),
    /// The driver failed, reported an error or answered nonsense (`error`
    /// has the secrets redacted).
    #[error("inference failed on turn {turn}: {error}")]
    Inference { turn: u32, error: String },
    #[error(transparent)]
    Compaction(#[from] CompactionError),
    /// The compaction model's call failed.
    #[error("compaction failed: {0}")]
    Compacting(Box<TurnError>),
}

impl AgentRun<'_> {
    /// The tool-use loop of one task; its tokens and turns accumulate in
    /// `state` as they happen, so a stopped task still accounts for them.
    pub(super) async fn turns(
        &self,
        state: &mut AgentState,
        tools: &[ToolDef],
        ids: &TaskIds<'_>,
        task: String,
        attachments: Vec<super::driver::Attachment>,
    ) -> Result<Option<String>, TaskFailure> {
        let spec = &self.plan.spec;
        let fail = |e: TurnError| Err(TaskFailure::Failed(e.to_string()));
        // The context's earlier messages (none unless its conversation is
        // kept), then the task.
        let mut messages = std::mem::take(&mut state.history);
        messages.push(Message {
            attachments,
            ..Message::user(task.clone())
        });
        let mut context_tokens = state.history_tokens;
        loop {
            // A spent budget stops the session before it pays for another call.
            if let Err(e) = self.check_budget(state) {
                return fail(e);
            }
            if state.task_turns >= spec.max_turns {
                let asked = messages
                    .iter()
                    .rev()
                    .find(|m| m.role == "assistant")
                    .map(|m| {
                        m.tool_calls
                            .iter()
                            .map(|c| c.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    })
                    .unwrap_or_default();
                return fail(TurnError::MaxTurns {
                    max: spec.max_turns,
                    asked,
                });
            }
            if spec.context_tokens > 0
                && context_tokens as f64 > spec.compaction_threshold * spec.context_tokens as f64
            {
                match Box::pin(self.compact(state, ids, &task, &messages, context_tokens)).await {
                    Ok(replacement) => messages = replacement,
                    Err(e) => return fail(e),
                }
                if let Err(e) = self.check_budget(state) {
                    return fail(e);
                }
            }
            state.task_turns += 1;
            state.total_turns += 1;
            let turn = state.task_turns;
            let (sent_from, continuation_id) = match state.continuation.active(ids.context_id) {
                Some((id, acked)) if acked <= messages.len() => (acked, Some(id.to_string())),
                _ => (0, None),
            };
            let call = Box::pin(self.call_driver(
                state,
                ids,
                DriverCall {
                    purpose: Purpose::Turn,
                    model: &spec.model,
                    messages: &messages[sent_from..],
                    tools,
                    continuation_id: continuation_id.as_deref(),
                    turn,
                },
            ))
            .await;
            let (response, metadata) = match call {
                Ok(r) => r,
                Err(e) => return fail(e),
            };
            context_tokens = response.usage.unwrap_or_default().total();
            // The driver has now seen everything sent plus its own answer.
            match continuation_of(&metadata) {
                Some(id) => state
                    .continuation
                    .record(id, ids.context_id, messages.len() + 1),
                None => state.continuation.clear(),
            }
            messages.push(Message::assistant(
                response.text.clone(),
                response.tool_calls.clone(),
            ));
            if let Err(e) = self.check_budget(state) {
                return fail(e);
            }
            if response.tool_calls.is_empty() {
                state.finished = Some((messages, context_tokens));
                return Ok(response.text);
            }
            for call in &response.tool_calls {
                let content = Box::pin(self.dispatch(state, ids, turn, call)).await;
                messages.push(Message::tool(call, content));
            }
        }
    }

    /// Fails the task when the session has used more than its token budget.
    pub(super) fn check_budget(&self, state: &AgentState) -> Result<(), TurnError> {
        match self.plan.spec.max_total_tokens {
            Some(max) if state.used.total() > max => Err(TurnError::Budget {
                used: state.used.total(),
                max,
            }),
            _ => Ok(()),
        }
    }

    /// One model call through the driver: trace, `inference` hook, usage.
    pub(super) async fn call_driver(
        &self,
        state: &mut AgentState,
        ids: &TaskIds<'_>,
        call: DriverCall<'_>,
    ) -> Result<(Response, Vec<(String, String)>), TurnError> {
        let spec = &self.plan.spec;
        let system = self.system_text();
        let limits = InferenceLimits {
            max_output_tokens: None,
            context_tokens: (spec.context_tokens > 0).then_some(spec.context_tokens),
        };
        let request = Request {
            protocol: driver::PROTOCOL,
            purpose: call.purpose,
            model: call.model,
            system: system.as_deref(),
            messages: call.messages,
            tools: call.tools,
            limits: &limits,
            continuation_id: call.continuation_id,
            stream: true,
        };
        let data = serde_json::to_string(&request).map_err(TurnError::Encode)?;
        // GenAI semantic conventions; no prompt text unless
        // telemetry.capture_content (the API key is never in `data`).
        let mut span = Span::start(format!("chat {}", call.model), Kind::Client, None);
        span.set("gen_ai.operation.name", "chat");
        span.set("gen_ai.request.model", call.model);
        span.set("roost.driver", spec.driver.as_str());
        span.set("roost.turn", u64::from(call.turn));
        if crate::telemetry::capture_content() {
            span.set(
                "gen_ai.input.messages",
                serde_json::to_string(call.messages).unwrap_or_default(),
            );
        }
        let started = Instant::now();
        let output = Box::pin(self.runtime.run_tool(
            &self.plan.driver,
            &spec.driver,
            Some(data),
            &self.driver_spec,
        ))
        .await;
        let latency_ms = started.elapsed().as_millis() as u64;
        self.trace_notes(state, ids, &spec.driver).await;
        let parsed = output
            .map_err(|e| e.to_string())
            .and_then(|out| match out.status {
                ToolStatus::Passed => Response::parse(out.data.as_deref())
                    .map(|r| (r, out.metadata))
                    .map_err(|e| e.to_string()),
                _ => Err(format!(
                    "the driver '{}' reported an error: {}",
                    spec.driver,
                    out.summary.unwrap_or_else(|| "no summary".into())
                )),
            });
        let (response, metadata) = match parsed {
            Ok(r) => r,
            Err(error) => {
                let error = self.plan.redact(&error);
                span.fail(error.as_str());
                self.broker
                    .metrics()
                    .inference(&self.capsule, call.model, None, started.elapsed());
                state
                    .trace
                    .event(
                        "inference",
                        json!({
                            "task_id": ids.task_id, "context_id": ids.context_id,
                            "turn": call.turn, "purpose": call.purpose, "model": call.model,
                            "latency_ms": latency_ms, "error": error,
                        }),
                    )
                    .await;
                return Err(TurnError::Inference {
                    turn: call.turn,
                    error,
                });
            }
        };
        let used = response.usage.unwrap_or_default();
        self.broker.metrics().inference(
            &self.capsule,
            call.model,
            Some((used.input_tokens, used.output_tokens)),
            started.elapsed(),
        );
        span.set("gen_ai.usage.input_tokens", used.input_tokens);
        span.set("gen_ai.usage.output_tokens", used.output_tokens);
        span.set(
            "gen_ai.response.finish_reasons",
            response.stop_reason.as_str(),
        );
        if crate::telemetry::capture_content()
            && let Some(text) = &response.text
        {
            span.set("gen_ai.output.messages", text.as_str());
        }
        drop(span);
        state.used.add(used);
        state.task_used.add(used);
        let fields = json!({
            "task_id": ids.task_id, "context_id": ids.context_id,
            "turn": call.turn, "purpose": call.purpose, "model": call.model,
            "input_tokens": used.input_tokens, "output_tokens": used.output_tokens,
            "latency_ms": latency_ms, "stop_reason": response.stop_reason,
            "tool_calls": response.tool_calls.len(),
            "continuation": call.continuation_id.is_some(),
            "messages_sent": call.messages.len(),
        });
        state.trace.event("inference", fields.clone()).await;
        Box::pin(self.hook(state, "inference", fields, Some(ids.task_id))).await;
        Ok((response, metadata))
    }

    /// Runs one tool call through the same dispatcher as `invoke`; returns what
    /// the model is told.
    pub(super) async fn dispatch(
        &self,
        state: &mut AgentState,
        ids: &TaskIds<'_>,
        turn: u32,
        call: &ToolCall,
    ) -> String {
        let started = Instant::now();
        let include_output = self.plan.spec.trace.include_tool_output;
        if !self.allowlist.contains(&call.name) {
            let error = format!(
                "tool '{}' is not declared in manifest allowlist (`tools:` in murmur.yaml)",
                call.name
            );
            let mut span = Span::start(format!("execute_tool {}", call.name), Kind::Internal, None);
            span.set("gen_ai.operation.name", "execute_tool");
            span.set("gen_ai.tool.name", call.name.as_str());
            span.set("roost.tool.status", "denied");
            span.fail("denied: not in the manifest's tools allow-list");
            self.broker
                .metrics()
                .tool_call(&self.capsule, "none", "denied", started.elapsed());
            state
                .trace
                .event(
                    "tool_call",
                    json!({
                        "task_id": ids.task_id, "turn": turn, "call_id": call.id,
                        "name": call.name, "status": "denied", "rule": "tools (allow-list)",
                        "duration_ms": 0, "error": error,
                    }),
                )
                .await;
            return format!("error: {error}");
        }
        let result = Box::pin(
            self.tools
                .invoke_data(&call.name, Some(call.arguments.clone())),
        )
        .await;
        let duration_ms = started.elapsed().as_millis() as u64;
        self.trace_notes(state, ids, &call.name).await;
        let (status, content) = match result {
            Ok(out) => (status_str(out.status), tool_content(out)),
            Err(error) => ("dispatch-error", format!("error: {error}")),
        };
        let mut fields = json!({
            "task_id": ids.task_id, "turn": turn, "call_id": call.id, "name": call.name,
            "status": status, "duration_ms": duration_ms,
        });
        if include_output {
            fields["output"] = json!(content);
        }
        state.trace.event("tool_call", fields).await;
        content
    }

    /// Records what a guest did during the last call that the trace keeps:
    /// requests the policy refused, A2A messages sent.
    pub(super) async fn trace_notes(&self, state: &mut AgentState, ids: &TaskIds<'_>, by: &str) {
        let Some(notes) = &self.driver_spec.notes else {
            return;
        };
        for note in notes.take() {
            let mut fields = json!({"task_id": ids.task_id, "by": by});
            if let (Some(f), Value::Object(extra)) = (fields.as_object_mut(), note.fields) {
                f.extend(extra);
            }
            state.trace.event(note.event, fields).await;
        }
    }
}

pub(super) fn continuation_of(metadata: &[(String, String)]) -> Option<String> {
    metadata
        .iter()
        .find(|(k, v)| k == "continuation_id" && !v.is_empty())
        .map(|(_, v)| v.clone())
}

pub(super) fn status_str(status: ToolStatus) -> &'static str {
    match status {
        ToolStatus::Passed => "passed",
        ToolStatus::Failed => "failed",
        ToolStatus::Error => "error",
    }
}

/// What the model is told a tool answered.
pub(super) fn tool_content(out: ToolOutput) -> String {
    let mut text = match (out.status, out.data, out.summary) {
        (ToolStatus::Passed, Some(data), _) => data,
        (ToolStatus::Passed, None, summary) => summary.unwrap_or_default(),
        (status, data, summary) => format!(
            "error ({}): {}{}",
            status_str(status),
            summary.unwrap_or_default(),
            data.map(|d| format!("\n{d}")).unwrap_or_default()
        ),
    };
    if out.truncated
        && let Some(path) = out.data_path
    {
        text.push_str(&format!("\n[output truncated; the full text is in {path}]"));
    }
    text
}
