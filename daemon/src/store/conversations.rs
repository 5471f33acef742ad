//! Agents' conversations per A2A context (migration 0012): read back when a
//! task of the context starts, saved through the task writer when one
//! completes, and dropped once their context has no task left
//! ([`drop_orphans`], after every retention delete).

use rusqlite::{Connection, params};
use sqlx::Row;

use super::writer::WriteOp;
use super::{Store, StoreError, now};

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
    route: String,
    context_id: String,
    conversation: Conversation,
}

impl Store {
    /// The conversation of `context_id` on `route`, if it has one.
    pub async fn conversation(
        &self,
        route: &str,
        context_id: &str,
    ) -> Result<Option<Conversation>, StoreError> {
        let row = sqlx::query(
            "SELECT messages, continuation_id, continuation_acked, context_tokens \
             FROM conversations WHERE route = ?1 AND context_id = ?2",
        )
        .bind(route)
        .bind(context_id)
        .fetch_optional(&self.reader)
        .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let count = |name: &str| -> Result<u64, StoreError> {
            Ok(row.try_get::<i64, _>(name)?.max(0) as u64)
        };
        let continuation = row
            .try_get::<Option<String>, _>("continuation_id")?
            .map(|id| Ok::<_, StoreError>((id, count("continuation_acked")?)))
            .transpose()?;
        Ok(Some(Conversation {
            messages: row.try_get("messages")?,
            continuation,
            context_tokens: count("context_tokens")?,
        }))
    }

    /// Replaces the conversation of `context_id` on `route` (committed with
    /// the next durable write: the task's end, which follows it).
    pub async fn save_conversation(
        &self,
        route: &str,
        context_id: &str,
        conversation: Conversation,
    ) -> Result<(), StoreError> {
        self.write_one(WriteOp::Conversation(SaveConversation {
            route: route.to_string(),
            context_id: context_id.to_string(),
            conversation,
        }))
        .await
        .map(drop)
    }
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

/// Deletes the conversations whose context has no task left (after tasks
/// were deleted in the same transaction).
pub(super) fn drop_orphans(conn: &Connection) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "DELETE FROM conversations WHERE NOT EXISTS (SELECT 1 FROM tasks t \
         WHERE t.context_id = conversations.context_id AND t.route = conversations.route)",
    )?
    .execute([])?;
    Ok(())
}
