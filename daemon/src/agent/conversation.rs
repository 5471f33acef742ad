//! An agent's conversation per A2A context (`context.conversation:
//! per_context`): a task starts from the messages of its context's earlier
//! completed tasks, read from the store, and the driver continuation they
//! left; a completed task's messages are saved back for the next one.

use super::*;
use crate::store::Conversation;

/// Most bytes of a context's messages kept: past it the oldest exchanges
/// are dropped (compaction keeps a conversation well under it).
const MAX_HISTORY_BYTES: usize = 1024 * 1024;

impl AgentRun<'_> {
    /// Starts `state` from the context's conversation, if it has one;
    /// answers how many messages it holds.
    pub(super) async fn load_conversation(
        &self,
        state: &mut AgentState,
        context_id: &str,
    ) -> usize {
        state.history.clear();
        state.history_tokens = 0;
        let stored = match self.store.conversation(&self.route, context_id).await {
            Ok(Some(stored)) => stored,
            Ok(None) => return 0,
            Err(error) => {
                tracing::warn!(%error, context_id, "cannot read the context's conversation; the task starts without it");
                return 0;
            }
        };
        match serde_json::from_str::<Vec<Message>>(&stored.messages) {
            Ok(messages) => {
                match stored.continuation {
                    Some((id, acked)) if acked as usize <= messages.len() => {
                        state.continuation.record(id, context_id, acked as usize);
                    }
                    _ => state.continuation.clear(),
                }
                state.history = messages;
                state.history_tokens = stored.context_tokens;
            }
            Err(error) => {
                tracing::warn!(%error, context_id, "the context's stored conversation does not read; the task starts without it");
            }
        }
        state.history.len()
    }

    /// Saves what a completed task left (`state.finished`) as its
    /// context's conversation.
    pub(super) async fn save_conversation(&self, state: &mut AgentState, context_id: &str) {
        let Some((mut messages, context_tokens)) = state.finished.take() else {
            return;
        };
        let mut continuation = state
            .continuation
            .active(context_id)
            .map(|(id, acked)| (id.to_string(), acked as u64));
        // A file is the task's: later tasks of the context read its name
        // in the message's text, not its bytes again.
        for message in &mut messages {
            message.attachments.clear();
        }
        if trim(&mut messages) {
            // The driver's count of what it saw no longer matches.
            continuation = None;
            state.continuation.clear();
        }
        let Ok(text) = serde_json::to_string(&messages) else {
            return;
        };
        let conversation = Conversation {
            messages: text,
            continuation,
            context_tokens,
        };
        if let Err(error) = self
            .store
            .save_conversation(&self.route, context_id, conversation)
            .await
        {
            tracing::warn!(%error, context_id, "cannot save the context's conversation");
        }
    }
}

/// Drops the oldest messages until the rest fit [`MAX_HISTORY_BYTES`] and
/// start with a user's message (never with a tool result whose call is
/// gone); `true` when it dropped any.
fn trim(messages: &mut Vec<Message>) -> bool {
    let size = |m: &Message| m.len() + 64;
    let mut total: usize = messages.iter().map(size).sum();
    let mut drop = 0;
    while drop < messages.len()
        && (total > MAX_HISTORY_BYTES || (drop > 0 && messages[drop].role != "user"))
    {
        total -= size(&messages[drop]);
        drop += 1;
    }
    messages.drain(..drop);
    drop > 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trimming_keeps_the_newest_exchanges_from_a_users_message() {
        let big = "x".repeat(MAX_HISTORY_BYTES / 3);
        let call = ToolCall {
            id: "c1".into(),
            name: "echo".into(),
            arguments: "{}".into(),
        };
        let mut messages = vec![
            Message::user(big.clone()),
            Message::assistant(None, vec![call.clone()]),
            Message::tool(&call, big.clone()),
            Message::assistant(Some(big.clone()), Vec::new()),
            Message::user("next"),
            Message::assistant(Some("answer".into()), Vec::new()),
        ];
        assert!(trim(&mut messages));
        assert_eq!(messages.len(), 2, "{messages:?}");
        assert_eq!(messages[0].content.as_deref(), Some("next"));
        let mut small = vec![
            Message::user("a"),
            Message::assistant(Some("b".into()), Vec::new()),
        ];
        assert!(!trim(&mut small));
        assert_eq!(small.len(), 2);
    }
}
