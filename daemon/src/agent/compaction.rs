//! Compaction: when the conversation nears `context.max_tokens`, it is
//! replaced by a compaction hook's answer or a summary from the compaction
//! model; any driver continuation is dropped.

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
