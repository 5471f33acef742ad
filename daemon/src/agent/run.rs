//! One launch of an agent session: checkpoints and `MURMUR.md`, then tasks
//! per the lifecycle (a pre-seeded `task.md`, then A2A tasks from the
//! queue), each with its hooks, trace and recorded usage.

use super::*;
use crate::ids::TaskId;
use crate::telemetry::{Kind, Span};

/// Where a task came from.
struct TaskInput {
    text: String,
    /// The files an A2A task's message carried, for the driver.
    attachments: Vec<super::driver::Attachment>,
    source: &'static str,
    /// An A2A task's ids (its row exists) and the token that cancels it.
    a2a: Option<(TaskId, String, CancellationToken)>,
}

/// One task's outcome, with what it used.
struct TaskOutcome {
    result: Result<Option<String>, TaskFailure>,
    usage: Usage,
    turns: u32,
}

#[derive(Debug)]
pub(super) enum TaskFailure {
    Failed(String),
    /// The session was stopped.
    Stopped,
    /// The A2A client canceled the task (the session goes on).
    Canceled,
}

/// An agent's task, as the task layer sees it end.
fn task_outcome(result: Result<Option<String>, TaskFailure>) -> Outcome {
    match result {
        Ok(answer) => Outcome::Completed(answer.unwrap_or_default()),
        Err(TaskFailure::Failed(e)) => Outcome::Failed(e),
        Err(TaskFailure::Canceled) => Outcome::Canceled,
        Err(TaskFailure::Stopped) => Outcome::Stopped,
    }
}

impl AgentRun<'_> {
    /// Runs the session: session-start, tasks per the lifecycle, session-end.
    pub async fn run(self) -> AgentEnd {
        let mut state = AgentState {
            trace: Trace::new(
                &self.workdir,
                &self.bookkeeping,
                &self.session_id,
                self.trace_max_bytes,
            ),
            continuation: Continuation::default(),
            total_turns: 0,
            used: self.used_before,
            task_used: Usage::default(),
            task_turns: 0,
            history: Vec::new(),
            history_tokens: 0,
            finished: None,
            queue: Box::pin(crate::tasks::Queue::open(
                &self.broker,
                &self.session_id,
                self.inbox.lock().ok().and_then(|mut i| i.take()),
            ))
            .await,
        };
        if self.plan.spec.lifecycle.hibernates().is_some() {
            state.queue.hibernates(&self.broker);
        }
        Box::pin(self.verify_checkpoints(&mut state)).await;
        let tools = self.tool_defs();
        Box::pin(self.write_murmur_md()).await;
        state
            .trace
            .event(
                "session_start",
                json!({
                    "capsule": self.capsule, "version": self.version,
                    "model": self.plan.spec.model, "driver": self.plan.spec.driver,
                    "tools": tools.iter().map(|t| &t.name).collect::<Vec<_>>(),
                    "capabilities": self.capabilities(),
                }),
            )
            .await;
        Box::pin(self.hook(&mut state, "session-start", json!({}), None)).await;
        let end = Box::pin(self.task_loop(&mut state, &tools)).await;
        Box::pin(std::mem::take(&mut state.queue).release(
            &self.broker,
            &self.session_id,
            self.shutdown.load(std::sync::atomic::Ordering::Relaxed),
        ))
        .await;
        let exit_status = match &end {
            AgentEnd::Completed => "ok",
            AgentEnd::Failed(_) => "failed",
            AgentEnd::Stopped => "stopped",
            AgentEnd::Hibernated => "hibernated",
        };
        let total_turns = state.total_turns;
        Box::pin(self.hook(
            &mut state,
            "session-end",
            json!({"total_turns": total_turns, "exit_status": exit_status}),
            None,
        ))
        .await;
        Box::pin(self.sign_checkpoints(&mut state)).await;
        state
            .trace
            .event(
                "session_end",
                json!({
                    "exit_status": exit_status, "total_turns": total_turns,
                    "input_tokens": state.used.input_tokens, "output_tokens": state.used.output_tokens,
                    "error": match &end { AgentEnd::Failed(e) => Some(e.as_str()), _ => None },
                }),
            )
            .await;
        state.trace.flush().await;
        end
    }

    /// Tasks per `lifecycle`: a pre-seeded `task.md` first; then, for sessions
    /// that take more, waiting for the next (the A2A gateway feeds them).
    async fn task_loop(&self, state: &mut AgentState, tools: &[ToolDef]) -> AgentEnd {
        let lifecycle = &self.plan.spec.lifecycle;
        let task_file = self.workdir.join(TASK_FILE);
        loop {
            if self.stop.is_cancelled() {
                return AgentEnd::Stopped;
            }
            let (root, path) = (self.workdir.clone(), task_file.clone());
            let text = match tokio::task::spawn_blocking(move || read_task(&root, &path)).await {
                Ok(Ok(text)) => text,
                Ok(Err(e)) => return AgentEnd::Failed(e.to_string()),
                Err(e) => return AgentEnd::Failed(format!("task.md reader failed: {e}")),
            };
            if let Some(text) = text {
                let input = TaskInput {
                    text,
                    attachments: Vec::new(),
                    source: "task_md",
                    a2a: None,
                };
                let mut span = Span::start("agent task", Kind::Internal, None);
                span.set("roost.task.source", "task_md");
                span.set("roost.route", self.route.as_str());
                let run = Box::pin(self.run_task(state, tools, input));
                let outcome = crate::telemetry::scope(span.traceparent(), run).await;
                if let Err(failure) = &outcome {
                    span.fail(format!("{failure:?}"));
                }
                drop(span);
                match (lifecycle.task_acceptance, outcome) {
                    (_, Err(TaskFailure::Stopped)) => return AgentEnd::Stopped,
                    (_, Err(TaskFailure::Failed(e))) => return AgentEnd::Failed(e),
                    (
                        TaskAcceptance::None | TaskAcceptance::Single,
                        Ok(_) | Err(TaskFailure::Canceled),
                    ) => {
                        return AgentEnd::Completed;
                    }
                    (TaskAcceptance::Queue, Ok(_) | Err(TaskFailure::Canceled)) => {
                        let (root, path) = (self.workdir.clone(), task_file.clone());
                        let removed = tokio::task::spawn_blocking(move || {
                            crate::fsx::remove_file(&root, &path)
                        })
                        .await
                        .unwrap_or_else(|e| Err(std::io::Error::other(e)));
                        if let Err(e) = removed
                            && e.kind() != std::io::ErrorKind::NotFound
                        {
                            return AgentEnd::Failed(format!(
                                "cannot remove {} after running it: {e}",
                                task_file.display()
                            ));
                        }
                        continue;
                    }
                }
            }
            if lifecycle.task_acceptance == TaskAcceptance::None {
                tracing::info!(
                    "no task.md, and lifecycle task_acceptance none takes no other tasks"
                );
                return AgentEnd::Completed;
            }
            // Waiting for an A2A task: queue+sleep waits until stopped;
            // everything else gives up after the idle timeout.
            // One that hibernates does so after `hibernate_after` idle.
            let idle = lifecycle
                .hibernates()
                .or((!lifecycle.waits_forever()).then_some(self.idle_timeout));
            let incoming = match state.queue.next(idle, &self.stop).await {
                crate::tasks::Next::Task(task) => task,
                crate::tasks::Next::Stopped => return AgentEnd::Stopped,
                crate::tasks::Next::Closed => return AgentEnd::Completed,
                crate::tasks::Next::Idle if lifecycle.hibernates().is_some() => {
                    if self.broker.begin_hibernation(&self.session_id) {
                        tracing::info!("idle for lifecycle.hibernate_after: hibernating");
                        return AgentEnd::Hibernated;
                    }
                    continue;
                }
                crate::tasks::Next::Idle => {
                    tracing::info!(
                        idle_secs = self.idle_timeout.as_secs(),
                        "no task arrived within the idle timeout (a2a.idle_timeout_secs); ending"
                    );
                    return AgentEnd::Completed;
                }
            };
            let outcome = Box::pin(self.run_a2a(state, tools, incoming)).await;
            let ends = lifecycle.ends_after_task();
            match outcome {
                Some(Outcome::Stopped) => return AgentEnd::Stopped,
                Some(Outcome::Failed(e)) if ends => return AgentEnd::Failed(e),
                Some(_) if ends => return AgentEnd::Completed,
                // Skipped (canceled while waiting) or done: the next one.
                _ => {}
            }
        }
    }

    /// One A2A task from the inbox, run through the broker (working, the
    /// turns, the answer as the task's artifact, its final state). `None`
    /// when it was canceled before it started.
    async fn run_a2a(
        &self,
        state: &mut AgentState,
        tools: &[ToolDef],
        incoming: crate::tasks::Incoming,
    ) -> Option<Outcome> {
        let input_timeout = Duration::from_secs(self.plan.spec.lifecycle.input_timeout_secs);
        self.broker
            .serve(
                incoming,
                Some(input_timeout),
                Some(&self.task_slot),
                |link, incoming| async move {
                    let input = TaskInput {
                        attachments: super::driver::Attachment::of_parts(&incoming.parts),
                        text: incoming.text,
                        source: "a2a",
                        a2a: Some((link.task_id, link.context_id, link.cancel)),
                    };
                    task_outcome(Box::pin(self.run_task(state, tools, input)).await)
                },
            )
            .await
    }

    /// One task: hooks and trace around the turns; usage recorded.
    async fn run_task(
        &self,
        state: &mut AgentState,
        tools: &[ToolDef],
        input: TaskInput,
    ) -> Result<Option<String>, TaskFailure> {
        let (task_id, context_id, cancel) = match input.a2a {
            Some(ids) => ids,
            None => (
                TaskId::generate(),
                format!("ctx_{}", uuid::Uuid::now_v7().simple()),
                CancellationToken::new(),
            ),
        };
        let recorded = input.source == "a2a";
        let input_bytes = input.text.len() as u64;
        if !recorded
            && let Err(error) = self
                .store
                .insert_task(&NewAgentTask {
                    id: &task_id,
                    session_id: &self.session_id,
                    context_id: &context_id,
                    source: input.source,
                    input_bytes,
                })
                .await
        {
            tracing::warn!(%error, task_id = %task_id, "cannot record task");
        }
        // An A2A task in a context with earlier tasks starts from them.
        let conversation =
            recorded && self.plan.spec.conversation() == ConversationMode::PerContext;
        let history = if conversation {
            Box::pin(self.load_conversation(state, &context_id)).await
        } else {
            state.history.clear();
            state.history_tokens = 0;
            0
        };
        let fields = json!({
            "task_id": task_id, "context_id": context_id,
            "source": input.source, "input_bytes": input_bytes,
        });
        let mut traced = fields.clone();
        traced["history_messages"] = json!(history);
        state.trace.event("task_start", traced).await;
        Box::pin(self.hook(state, "task-start", fields, Some(&task_id))).await;
        tracing::info!(task_id = %task_id, source = input.source, input_bytes, "task started");

        let ids = TaskIds {
            task_id: &task_id,
            context_id: &context_id,
        };
        state.task_used = Usage::default();
        state.task_turns = 0;
        let result = tokio::select! {
            result = Box::pin(self.turns(state, tools, &ids, input.text, input.attachments)) => result,
            () = self.stop.cancelled() => Err(TaskFailure::Stopped),
            () = cancel.cancelled() => Err(TaskFailure::Canceled),
        };
        if conversation && result.is_ok() {
            Box::pin(self.save_conversation(state, &context_id)).await;
        }
        state.finished = None;
        let outcome = TaskOutcome {
            result,
            usage: state.task_used,
            turns: state.task_turns,
        };
        let (exit_status, task_state, error, answer) = match &outcome.result {
            Ok(answer) => ("ok", "completed", None, answer.clone()),
            Err(TaskFailure::Failed(e)) => ("failed", "failed", Some(e.clone()), None),
            Err(TaskFailure::Stopped) => ("stopped", "canceled", Some("stopped".into()), None),
            Err(TaskFailure::Canceled) => (
                "canceled",
                "canceled",
                Some("canceled by the client".into()),
                None,
            ),
        };
        if let Err(e) = self
            .store
            .finish_task(&TaskEnd {
                id: &task_id,
                session_id: &self.session_id,
                state: (!recorded).then_some(task_state),
                error: error.as_deref(),
                input_tokens: outcome.usage.input_tokens,
                output_tokens: outcome.usage.output_tokens,
                turns: outcome.turns,
            })
            .await
        {
            tracing::warn!(error = %e, task_id = %task_id, "cannot record task end");
        }
        let fields = json!({
            "task_id": task_id, "context_id": context_id, "exit_status": exit_status,
            "turns": outcome.turns,
            "input_tokens": outcome.usage.input_tokens, "output_tokens": outcome.usage.output_tokens,
        });
        let mut traced = fields.clone();
        traced["answer"] = json!(answer);
        traced["error"] = json!(error);
        state.trace.event("task_end", traced).await;
        Box::pin(self.hook(state, "task-end", fields, Some(&task_id))).await;
        state.trace.flush().await;
        tracing::info!(
            task_id = %task_id,
            exit_status,
            turns = outcome.turns,
            input_tokens = outcome.usage.input_tokens,
            output_tokens = outcome.usage.output_tokens,
            error = error.as_deref().unwrap_or(""),
            "task ended"
        );
        outcome.result
    }
}

/// Why `task.md` cannot be taken as a task.
#[derive(Debug, thiserror::Error)]
pub enum TaskFileError {
    #[error("cannot open {}: {source} (it must be a regular file)", path.display())]
    Open {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} is not a regular file", path.display())]
    NotAFile { path: std::path::PathBuf },
    #[error("{} is {size} bytes; a task may be at most {max} bytes", path.display())]
    TooLarge {
        path: std::path::PathBuf,
        size: u64,
        max: u64,
    },
}

/// Reads `task.md`: a regular file (never followed through a link a tool may
/// have planted, on the way to the workdir `root` or below it: `fsx`) of at
/// most [`crate::tasks::model::MAX_TASK_BYTES`]; `None` when absent.
fn read_task(
    root: &std::path::Path,
    path: &std::path::Path,
) -> Result<Option<String>, TaskFileError> {
    use std::io::Read;
    let file = match crate::fsx::open_read(root, path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(TaskFileError::Open {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    let read = |source| TaskFileError::Read {
        path: path.to_path_buf(),
        source,
    };
    let meta = file.metadata().map_err(read)?;
    let max = crate::tasks::model::MAX_TASK_BYTES as u64;
    if !meta.is_file() {
        return Err(TaskFileError::NotAFile {
            path: path.to_path_buf(),
        });
    }
    if meta.len() > max {
        return Err(TaskFileError::TooLarge {
            path: path.to_path_buf(),
            size: meta.len(),
            max,
        });
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(max).read_to_end(&mut bytes).map_err(read)?;
    Ok(Some(String::from_utf8_lossy(&bytes).into_owned()))
}
