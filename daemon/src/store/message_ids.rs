//! De-duplication entries whose tasks are gone: counted as tasks are
//! deleted, and cleared in key order once enough have gone (migration
//! 0022). A task's delete leaves its entry, since the entry's page is random
//! to the task's age; a lookup joins the task, so the entry finds nothing
//! until this clears it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use sqlx::Row;

use super::writer::WriteOp;
use super::{Store, StoreError};

/// Entries a reader looks over per round; the writer deletes the gone
/// ones among them, which lie on the few pages those entries fill.
const CHUNK: i64 = 1000;

/// Tasks deleted before a sweep is worth its walk, at least.
pub(super) const SWEEP_AFTER: u64 = 10_000;

/// How many tasks went since the last sweep, whether that count has been
/// seeded from the table since roostd started, and whether a sweep runs.
#[derive(Default)]
pub(super) struct Sweeps {
    gone: AtomicU64,
    seeded: AtomicBool,
    running: AtomicBool,
}

/// Marks a sweep as running until dropped.
struct Running<'a>(&'a Sweeps);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.running.store(false, Ordering::Release);
    }
}

/// What one sweep did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Swept {
    /// Entries looked over.
    pub walked: u64,
    /// Entries deleted (their tasks were gone).
    pub forgotten: u64,
}

impl Store {
    /// `n` tasks were deleted: their entries are left for a sweep.
    pub(super) fn tasks_gone(&self, n: u64) {
        self.sweeps.gone.fetch_add(n, Ordering::Relaxed);
    }

    /// Sweeps the entries of gone tasks once as many tasks have gone as
    /// there are A2A tasks stored (so the table holds at most about twice
    /// the entries it needs), and at least [`SWEEP_AFTER`]: a walk costs
    /// ~4 µs an entry (BENCHMARKS.md), so each gone task pays for about two
    /// entries walked, and a page written holds several entries cleared.
    /// Retention calls it after its deletes.
    pub(super) async fn sweep_if_due(&self) -> Result<(), StoreError> {
        let stored = || async {
            let n: i64 = sqlx::query_scalar("SELECT COALESCE(SUM(n), 0) FROM task_counts")
                .fetch_one(&self.reader)
                .await?;
            Ok::<_, StoreError>(n.max(0) as u64)
        };
        // The count is in memory: the first time after a start, the entries
        // beyond the tasks stored are what went before it (else a roostd
        // restarted more often than it deletes its store's worth would
        // never sweep).
        if !self.sweeps.seeded.load(Ordering::Relaxed) {
            let entries: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM task_messages")
                .fetch_one(&self.reader)
                .await?;
            // (This round's deletes are among them, maybe counted already.)
            let before = (entries.max(0) as u64).saturating_sub(stored().await?);
            self.sweeps.gone.fetch_max(before, Ordering::Relaxed);
            self.sweeps.seeded.store(true, Ordering::Relaxed);
        }
        let gone = self.sweeps.gone.load(Ordering::Relaxed);
        if gone < SWEEP_AFTER {
            return Ok(());
        }
        if gone >= stored().await? {
            self.sweep_message_ids().await?;
        }
        Ok(())
    }

    /// Deletes every de-duplication entry whose task is gone: a reader
    /// walks the entries in key order, [`CHUNK`] at a time, and the writer
    /// deletes the gone ones of each chunk (an entry its message's new task
    /// took over meanwhile stays). One sweep at a time; `None` when one is
    /// already running.
    pub async fn sweep_message_ids(&self) -> Result<Option<Swept>, StoreError> {
        if self.sweeps.running.swap(true, Ordering::AcqRel) {
            return Ok(None);
        }
        // Cleared however the walk ends: an error, or its caller gone (a
        // `roostctl prune` whose client hung up drops it midway).
        let _running = Running(&self.sweeps);
        let gone = self.sweeps.gone.swap(0, Ordering::Relaxed);
        let swept = match self.sweep(CHUNK).await {
            Ok(swept) => swept,
            Err(e) => {
                // Still to be swept, with those that go meanwhile.
                self.sweeps.gone.fetch_add(gone, Ordering::Relaxed);
                return Err(e);
            }
        };
        tracing::debug!(
            walked = swept.walked,
            forgotten = swept.forgotten,
            "de-duplication entries of gone tasks cleared"
        );
        Ok(Some(swept))
    }

    /// The walk, `chunk` entries a round: SQLite picks out the gone
    /// tasks' entries of each chunk on the reader, so only those (and the
    /// chunk's last key, with how many it held) come back.
    pub(super) async fn sweep(&self, chunk: i64) -> Result<Swept, StoreError> {
        let walk = |after: &str| {
            format!(
                "WITH chunk AS MATERIALIZED (SELECT route, owner, message_id, task_id \
                 FROM task_messages {after} ORDER BY route, owner, message_id LIMIT ?4) \
                 SELECT route, owner, message_id, task_id, 0 FROM chunk \
                 WHERE NOT EXISTS (SELECT 1 FROM tasks t WHERE t.id = chunk.task_id) \
                 UNION ALL SELECT * FROM (SELECT route, owner, message_id, '', \
                 (SELECT COUNT(*) FROM chunk) FROM chunk \
                 ORDER BY route DESC, owner DESC, message_id DESC LIMIT 1)"
            )
        };
        let first = walk("");
        let next = walk("WHERE (route, owner, message_id) > (?1, ?2, ?3)");
        let mut swept = Swept::default();
        let mut after: Option<[String; 3]> = None;
        loop {
            let query = match &after {
                None => sqlx::query(&first).bind("").bind("").bind(""),
                Some([route, owner, message_id]) => sqlx::query(&next)
                    .bind(route.as_str())
                    .bind(owner.as_str())
                    .bind(message_id.as_str()),
            };
            let mut rows = query.bind(chunk).fetch_all(&self.reader).await?;
            // The last row is the chunk's last key and its size (none
            // when the walk is past the end).
            let walked = match rows.last() {
                Some(last) if last.get::<i64, _>(4) > 0 => {
                    after = Some([last.get(0), last.get(1), last.get(2)]);
                    let walked = last.get::<i64, _>(4);
                    rows.pop();
                    walked
                }
                _ => 0,
            };
            swept.walked += walked as u64;
            let gone: Vec<[String; 4]> = rows
                .iter()
                .map(|r| [r.get(0), r.get(1), r.get(2), r.get(3)])
                .collect();
            if !gone.is_empty() {
                swept.forgotten += self.write_one(WriteOp::ForgetMessages(gone)).await?;
            }
            if walked < chunk {
                return Ok(swept);
            }
        }
    }
}
