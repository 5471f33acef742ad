//! Hibernated sessions' rows: the move to `hibernated` and back, and what
//! start-up reads to keep their routes open without staging them.

use roost_wire::api::Session;
use sqlx::Row;

use super::session_writes::SessionWrite;
use super::{Store, StoreError, now};

/// A hibernated session as start-up finds it.
#[derive(Debug, Clone)]
pub struct Asleep {
    pub id: String,
    pub name: String,
    /// Its inbox's `queue_depth` and `same_context` rule (as written).
    pub depth: u32,
    pub same_context: String,
}

impl Store {
    /// The session hibernates (only one `running`: `false` otherwise, and
    /// nothing changed).
    pub async fn mark_hibernated(
        &self,
        id: &str,
        depth: u32,
        same_context: &'static str,
    ) -> Result<bool, StoreError> {
        let changed = self
            .session_write(SessionWrite::Hibernated {
                id: id.to_string(),
                depth,
                same_context,
                at: now(),
            })
            .await?;
        Ok(changed > 0)
    }

    /// A task woke the session: `running` again; its record.
    pub async fn mark_woken(&self, id: &str) -> Result<Session, StoreError> {
        self.session_write(SessionWrite::Woken {
            id: id.to_string(),
            at: now(),
        })
        .await?;
        self.get(id)
            .await?
            .ok_or_else(|| StoreError::Corrupt(format!("session {id} vanished while waking")))
    }

    /// Every hibernated session, with its inbox's shape.
    pub async fn hibernated(&self) -> Result<Vec<Asleep>, StoreError> {
        let rows = sqlx::query(
            "SELECT s.id, s.name, h.depth, h.same_context FROM hibernations h \
             JOIN sessions s ON s.id = h.session_id WHERE s.state = 'running'",
        )
        .fetch_all(&self.reader)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(Asleep {
                    id: r.try_get("id")?,
                    name: r.try_get("name")?,
                    depth: r.try_get("depth")?,
                    same_context: r.try_get("same_context")?,
                })
            })
            .collect()
    }

    /// Hibernated sessions with A2A tasks accepted that never started (sent
    /// just before roostd stopped): woken at start-up.
    pub async fn hibernated_with_tasks(&self) -> Result<Vec<String>, StoreError> {
        Ok(sqlx::query_scalar(HIBERNATED_WITH_TASKS)
            .fetch_all(&self.reader)
            .await?)
    }
}

/// From the hibernated sessions to their tasks, so start-up reads only
/// theirs: joined the other way, SQLite walked every task's entry in
/// `tasks_session` (0.1 s at 300,000 tasks, with no session asleep).
pub(super) const HIBERNATED_WITH_TASKS: &str = "SELECT h.session_id FROM hibernations h \
     WHERE EXISTS (SELECT 1 FROM tasks t WHERE t.session_id = h.session_id \
     AND t.source = 'a2a' AND t.state = 'submitted')";
