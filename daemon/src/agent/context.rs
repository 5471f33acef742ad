//! What surrounds an agent's turns: compaction (by model or hook), hooks,
//! the system prompt and `MURMUR.md`, the tool definitions the model sees,
//! and checkpoint verification and signing.

use super::*;

impl AgentRun<'_> {
    /// Replaces the conversation with a shorter one: a compaction hook's
    /// answer, or a summary from the compaction model. Drops any continuation.
    pub(super) async fn compact(
        &self,
        state: &mut AgentState,
        ids: &TaskIds<'_>,
        task: &str,
        messages: &[Message],
        tokens: u64,
    ) -> Result<Vec<Message>, TurnError> {
        let spec = &self.plan.spec;
        state.continuation.clear();
        let payload = json!({
            "task_id": ids.task_id, "context_id": ids.context_id,
            "context_tokens": tokens, "max_tokens": spec.context_tokens,
            "threshold": spec.compaction_threshold, "messages": messages,
        });
        let answer = Box::pin(self.hook(state, "compaction", payload, Some(ids.task_id))).await;
        let (replacement, source) = match answer {
            Some((hook, text)) => (replacement_from_hook(&text, task)?, format!("hook:{hook}")),
            None => {
                let model = spec.compaction_model.as_deref().unwrap_or(&spec.model);
                let mut request = messages.to_vec();
                request.push(Message::user(COMPACTION_REQUEST));
                let (response, _) = self
                    .call_driver(
                        state,
                        ids,
                        DriverCall {
                            purpose: Purpose::Compaction,
                            model,
                            messages: &request,
                            tools: &[],
                            continuation_id: None,
                            turn: 0,
                        },
                    )
                    .await
                    .map_err(|e| TurnError::Compacting(Box::new(e)))?;
                let summary = response.text.unwrap_or_default();
                (
                    vec![Message::user(compacted(task, &summary))],
                    format!("model:{model}"),
                )
            }
        };
        state
            .trace
            .event(
                "compaction",
                json!({
                    "task_id": ids.task_id, "context_id": ids.context_id,
                    "context_tokens": tokens, "source": source,
                    "messages_before": messages.len(), "messages_after": replacement.len(),
                }),
            )
            .await;
        tracing::info!(task_id = ids.task_id, source = %source, tokens, "context compacted");
        Ok(replacement)
    }

    /// Sends `kind` to every hook bound to it, in order; a failing or slow
    /// hook is logged and traced and the session goes on. Returns the first
    /// answer (`Ok(Some(json))`) with the hook's name.
    pub(super) async fn hook(
        &self,
        state: &mut AgentState,
        kind: &str,
        mut payload: Value,
        task_id: Option<&str>,
    ) -> Option<(String, String)> {
        payload["session_id"] = json!(self.session_id);
        payload["capsule"] = json!(self.capsule);
        let payload = payload.to_string();
        // After a stop the end-of-task and end-of-session events still reach
        // hooks: they run under their own deadline, not the cancelled token.
        let stopped_spec;
        let spec = if self.stop.is_cancelled() {
            let mut fresh = self.tool_spec.clone();
            fresh.stop = CancellationToken::new();
            stopped_spec = fresh;
            &stopped_spec
        } else {
            &self.tool_spec
        };
        let mut first = None;
        for (name, hook, manifest) in &self.plan.hooks {
            if !handles(manifest, kind) {
                continue;
            }
            let started = Instant::now();
            match Box::pin(self.runtime.call_hook(hook, kind, &payload, spec)).await {
                Ok(Some(answer)) if first.is_none() => first = Some((name.clone(), answer)),
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(hook = %name, kind, %error, "hook failed; the session goes on");
                    state
                        .trace
                        .event(
                            "hook_error",
                            json!({
                                "hook": name, "kind": kind, "task_id": task_id,
                                "error": error.to_string(),
                                "duration_ms": started.elapsed().as_millis() as u64,
                            }),
                        )
                        .await;
                }
            }
        }
        first
    }

    /// The system message: the capsule's prompt, then MURMUR.md.
    pub(super) fn system_text(&self) -> Option<String> {
        let md = self.murmur_md_text();
        Some(match &self.plan.system_prompt {
            Some(prompt) => format!("{prompt}\n\n{md}"),
            None => md,
        })
    }

    pub(super) fn murmur_md_text(&self) -> String {
        let listed: Vec<murmur_md::Listed> = self
            .tool_defs()
            .into_iter()
            .map(|t| match self.artifacts.target(&t.name, &self.policy) {
                Target::Skill(_) => murmur_md::Listed {
                    description: self
                        .artifacts
                        .describe(&t.name, &self.policy)
                        .map(|i| i.description)
                        .unwrap_or_default(),
                    name: t.name,
                    skill: true,
                },
                _ => murmur_md::Listed {
                    name: t.name,
                    description: t.description,
                    skill: false,
                },
            })
            .collect();
        murmur_md::render(
            &murmur_md::Identity {
                name: &self.capsule,
                version: &self.version,
                session_id: &self.session_id,
                url: &self.url,
            },
            &self.plan.spec,
            &self.policy,
            &listed,
            self.plan.has_compaction_hook(),
        )
    }

    pub(super) async fn write_murmur_md(&self) {
        let path = self.bookkeeping.join(murmur_md::MURMUR_MD);
        let text = self.murmur_md_text();
        let root = self.workdir.clone();
        // Never through a link (or a hard link) a tool may have planted.
        let written = tokio::task::spawn_blocking(move || {
            crate::fsx::replace(&root, &path, text.as_bytes(), 0o644).map_err(|e| (path, e))
        })
        .await;
        if let Ok(Err((path, error))) = written {
            tracing::warn!(path = %path.display(), %error, "cannot write MURMUR.md");
        }
    }

    /// The allow-listed tools the model may call, with their schemas.
    pub(super) fn tool_defs(&self) -> Vec<ToolDef> {
        let mut out = Vec::new();
        let mut names: Vec<&String> = self.allowlist.iter().collect();
        names.sort();
        for name in names {
            let (description, schema) = match self.artifacts.target(name, &self.policy) {
                Target::Wasm(_) | Target::Native(_) => {
                    match self.artifacts.describe(name, &self.policy) {
                        Ok(info) => (
                            info.description,
                            info.input_schema
                                .and_then(|s| serde_json::from_str(&s).ok())
                                .unwrap_or_else(|| json!({"type": "object"})),
                        ),
                        Err(_) => continue,
                    }
                }
                Target::Skill(_) => {
                    let description = self
                        .artifacts
                        .describe(name, &self.policy)
                        .map(|i| i.description)
                        .unwrap_or_default();
                    (
                        format!(
                            "Skill: {description} Call it by name, with no arguments, to load its guidance."
                        ),
                        json!({"type": "object", "properties": {}}),
                    )
                }
                Target::Shell => shell_tool(name),
                Target::NotATool(_) | Target::Missing => continue,
            };
            out.push(ToolDef {
                name: name.clone(),
                description,
                input_schema: schema,
            });
        }
        out
    }

    pub(super) fn capabilities(&self) -> Value {
        json!({
            "network": self.policy.network_allow.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "shell": self.policy.shell_allow,
            "read_only": self.policy.read_only,
            "read_write": self.policy.read_write,
        })
    }

    pub(super) async fn verify_checkpoints(&self, state: &mut AgentState) {
        let Some(key) = self.checkpoint_key.clone() else {
            return;
        };
        let workdir = self.workdir.clone();
        let rejected = tokio::task::spawn_blocking(move || checkpoint::verify(&key, &workdir))
            .await
            .unwrap_or_default();
        for r in rejected {
            tracing::warn!(
                path = %r.path,
                reason = r.reason,
                "checkpoint rejected: renamed to {}{}",
                r.path,
                checkpoint::REJECTED_SUFFIX
            );
            state
                .trace
                .event(
                    "checkpoint_rejected",
                    json!({"path": r.path, "reason": r.reason}),
                )
                .await;
        }
    }

    pub(super) async fn sign_checkpoints(&self, state: &mut AgentState) {
        let Some(key) = self.checkpoint_key.clone() else {
            return;
        };
        let workdir = self.workdir.clone();
        let signed = tokio::task::spawn_blocking(move || checkpoint::sign(&key, &workdir)).await;
        match signed {
            Ok(Ok(0)) => {}
            Ok(Ok(n)) => {
                state
                    .trace
                    .event("checkpoints_signed", json!({"files": n}))
                    .await;
            }
            Ok(Err(error)) => tracing::warn!(%error, "cannot sign checkpoints"),
            Err(error) => tracing::warn!(%error, "checkpoint signing task failed"),
        }
    }
}

/// How the model is told to call an allow-listed binary.
pub(super) fn shell_tool(name: &str) -> (String, Value) {
    let interpreter = crate::tools::shell::INTERPRETERS.contains(&name);
    let (description, command) = if interpreter {
        (
            format!("Run a `{name} -c` command line in the workdir."),
            format!("the command line {name} runs"),
        )
    } else {
        (
            format!("Run `{name}` in the workdir with the given arguments."),
            format!("the arguments for {name} (not the program name), quoted as in a shell"),
        )
    };
    let schema = json!({
        "type": "object",
        "properties": {"command": {"type": "string", "description": command}},
        "required": ["command"],
    });
    (description, schema)
}

/// What the compaction model is asked.
pub(super) const COMPACTION_REQUEST: &str = "Summarise the conversation so far for yourself: the task, \
what has been done, what was learned from tool results, and what remains. Answer with the \
summary only.";

pub(super) fn compacted(task: &str, summary: &str) -> String {
    format!("{task}\n\n---\nEarlier work on this task was compacted. Summary so far:\n{summary}")
}

/// A compaction hook answers `{"messages": […]}` (the new conversation) or
/// `{"summary": "…"}` (or plain text, taken as the summary).
/// A compaction hook's answer that gives no conversation to go on with.
#[derive(Debug, thiserror::Error)]
pub enum CompactionError {
    #[error("the compaction hook's `messages` are not valid: {0}")]
    Messages(#[source] serde_json::Error),
    #[error("the compaction hook answered an empty `messages` list")]
    Empty,
    #[error("the compaction hook must answer {{\"messages\": […]}} or {{\"summary\": \"…\"}}")]
    Shape,
}

pub(super) fn replacement_from_hook(
    answer: &str,
    task: &str,
) -> Result<Vec<Message>, CompactionError> {
    match serde_json::from_str::<Value>(answer) {
        Ok(Value::Object(map)) => {
            if let Some(messages) = map.get("messages") {
                let messages: Vec<Message> =
                    serde_json::from_value(messages.clone()).map_err(CompactionError::Messages)?;
                if messages.is_empty() {
                    return Err(CompactionError::Empty);
                }
                Ok(messages)
            } else if let Some(Value::String(summary)) = map.get("summary") {
                Ok(vec![Message::user(compacted(task, summary))])
            } else {
                Err(CompactionError::Shape)
            }
        }
        _ => Ok(vec![Message::user(compacted(task, answer))]),
    }
}
