//! Session state changes across the daemon, in the order they were
//! committed (`session_events`, written by the triggers of migration 0001),
//! and the signal that there are new ones (`roostctl events`).

use roost_wire::api::SessionEvent;
use sqlx::Row;

use super::{Store, StoreError};

/// Changes read at once; a follower reads again for more.
const PAGE: i64 = 1000;

impl Store {
    /// Up to a page of changes after `after` (a `seq`), oldest first.
    pub async fn session_events_after(&self, after: i64) -> Result<Vec<SessionEvent>, StoreError> {
        let rows = sqlx::query(
            "SELECT e.seq, e.at, e.session_id, s.name, s.capsule, e.state, e.detail \
             FROM session_events e JOIN sessions s ON s.id = e.session_id \
             WHERE e.seq > ?1 ORDER BY e.seq LIMIT ?2",
        )
        .bind(after)
        .bind(PAGE)
        .fetch_all(&self.reader)
        .await?;
        rows.iter()
            .map(|r| {
                let state: String = r.try_get("state")?;
                Ok(SessionEvent {
                    seq: r.try_get("seq")?,
                    at: r.try_get("at")?,
                    session_id: r.try_get("session_id")?,
                    name: r.try_get("name")?,
                    capsule: r.try_get("capsule")?,
                    state: state
                        .parse()
                        .map_err(|e: String| StoreError::Corrupt(format!("session_events: {e}")))?,
                    detail: r.try_get("detail")?,
                })
            })
            .collect()
    }

    /// The `seq` after which the last `n` changes follow (0: from the first).
    pub async fn session_events_tail(&self, n: u64) -> Result<i64, StoreError> {
        let n = i64::try_from(n).unwrap_or(i64::MAX);
        let seq: Option<i64> = sqlx::query_scalar(
            "SELECT seq FROM session_events ORDER BY seq DESC LIMIT 1 OFFSET ?1",
        )
        .bind(n)
        .fetch_optional(&self.reader)
        .await?;
        Ok(seq.unwrap_or(0))
    }

    /// Changes when a session write has been committed (the value itself
    /// means nothing).
    pub fn session_changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.session_changes.subscribe()
    }
}
