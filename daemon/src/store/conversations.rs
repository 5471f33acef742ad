//! Agents' conversations per A2A context (migration 0012): read back when a
//! task of the context starts, saved through the task writer when one
//! completes (as `conversation_writes.rs` says), and dropped with their
//! context's last task (migration 0013's trigger).

use sqlx::Row;

pub use super::conversation_writes::Conversation;
use super::conversation_writes::SaveConversation;
use super::writer::WriteOp;
use super::{Store, StoreError};

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
