//! The conversation write the task writer applies, as SQL: a context's
//! conversation replaced. (A conversation goes with its context's last
//! task by a trigger, migration 0013.)

use rusqlite::{Connection, params};

use super::now;

/// A context's conversation as stored: the messages as the agent wrote
/// them (a JSON array; the store does not read it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Conversation {
    pub messages: String,
    /// The driver's continuation id and how many messages it has seen.
    pub continuation: Option<(String, u64)>,
    /// The context's size in tokens at its last turn.
    pub context_tokens: u64,
}

/// A conversation saved on the writer.
pub(super) struct SaveConversation {
    pub(super) route: String,
    pub(super) context_id: String,
    pub(super) conversation: Conversation,
}

/// Writes a conversation (on the writer's thread, in its transaction).
pub(super) fn save(conn: &Connection, save: &SaveConversation) -> rusqlite::Result<u64> {
    let c = &save.conversation;
    let (id, acked) = match &c.continuation {
        Some((id, acked)) => (Some(id.as_str()), *acked),
        None => (None, 0),
    };
    let saved = conn
        .prepare_cached(
            "INSERT OR REPLACE INTO conversations (route, context_id, messages, \
             continuation_id, continuation_acked, context_tokens, updated_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )?
        .execute(params![
            save.route,
            save.context_id,
            c.messages,
            id,
            i64::try_from(acked).unwrap_or(i64::MAX),
            i64::try_from(c.context_tokens).unwrap_or(i64::MAX),
            now()
        ])?;
    Ok(saved as u64)
}
