//! The task writer: one OS thread that owns a SQLite connection and commits
//! A2A tasks, their events and ends, and batches of retention deletes, in
//! groups. WAL checkpoints run on a thread of their own (`checkpointer.rs`)
//! so that no commit waits for one.
//!
//! Why a thread of its own: through sqlx each statement, `BEGIN` and
//! `COMMIT` is a round trip to sqlx's worker thread (and `BEGIN`/`COMMIT`
//! two); here a whole group is one hop in and one hop out.
//!
//! Retention's deletes (`WriteOp::background`, `roostctl prune`'s and
//! `rm`'s batches too) are committed by the thread
//! alone, each batch in a commit of its own and only when no other write
//! waits (or the batch has waited [`BACKGROUND_WAIT`]): a client's commit
//! never waits for a batch of deletes it would have been grouped with, and
//! retention uses the time the writer would have been idle. (Until issue
//! 36's sixth stop a batch joined the group of whatever was queued with it,
//! and each of its several milliseconds held every client's commit.)
//!
//! It does not die with a write: a panic fails the jobs of the group in
//! hand (their callers hear `Stopped`), the transaction is rolled back and
//! the thread goes on with the rest. Whoever waits on it waits at most
//! [`WRITE_DEADLINE`]. When it is idle, a caller commits on its own thread
//! instead (`commit.rs`, with its rules for a synced commit): a lone
//! request's write then makes no hop at all.
//!
//! What it costs per write is kept small: a task's events in one job are
//! numbered with one lookup and change the task's row with one update; no
//! savepoints or triggers (each makes SQLite copy every page it touches into
//! a statement journal first). A write that fails undoes its group, and the
//! group's jobs are tried again one by one, so it fails alone.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags};

use super::wal::{WAL_SIZE_LIMIT, WalFrames};
pub(super) use super::writes::{RowChange, TaskEndRow, WriteOp};
use tokio::sync::oneshot;

mod commit;
#[cfg(test)]
mod tests;

/// The longest anyone waits for the writer before giving up with
/// [`WriteError::Timeout`] (a disk that hangs, not a slow one).
pub const WRITE_DEADLINE: Duration = Duration::from_secs(30);

/// Most writes one transaction takes.
const WRITES_PER_COMMIT: usize = 256;

/// How many groups of one waiting caller the thread takes, after one of
/// more, before callers commit on their own threads again.
const CROWDED: u8 = 8;

/// How long retention's writes (`WriteOp::background`) wait for the writer
/// to have nothing else to commit before they go next anyway: under a load
/// that never lets it go idle, retention still gets a batch in every this
/// much (a batch of [`super::writes::PRUNE_BATCH`] deletes is a few ms).
const BACKGROUND_WAIT: Duration = Duration::from_millis(20);

/// How long writes nobody waits for (a task's streamed updates) may wait for
/// a write somebody does, to share its commit. Streams see updates this much
/// later at most; a task that streams and then ends makes one commit.
const LINGER: Duration = Duration::from_millis(1);

/// What a write did: the event's sequence number (`None`: its task has
/// ended and took no more), or why it failed.
pub(super) type Written = Result<Option<u64>, WriteError>;

/// Why the task writer did not do what it was asked.
#[derive(Debug, Clone, thiserror::Error)]
pub enum WriteError {
    #[error("cannot open {}: {source}", path.display())]
    Open {
        path: PathBuf,
        #[source]
        source: Arc<rusqlite::Error>,
    },
    #[error("cannot start the task writer: {0}")]
    Thread(#[source] Arc<std::io::Error>),
    #[error("the task writer has stopped")]
    Stopped,
    #[error("the task writer did not answer within {} s", WRITE_DEADLINE.as_secs())]
    Timeout,
    /// A statement of the write's transaction failed (and the write with it).
    #[error("{0}")]
    Sql(#[source] Arc<rusqlite::Error>),
    #[error("WAL checkpoint: {0}")]
    Checkpoint(#[source] Arc<rusqlite::Error>),
}

/// What runs on the writer's thread with a job's answers once its writes are
/// committed (or failed), in commit order.
pub(super) type Then = Box<dyn FnOnce(Vec<Written>) + Send>;

/// A job waiting for a commit.
struct Queued {
    ops: Vec<WriteOp>,
    then: Then,
    urgent: bool,
    /// Non-zero: its caller may withdraw it while it waits ([`TaskWriter::withdraw`]).
    ticket: u64,
}

impl Queued {
    /// Its writes, as [`WRITES_PER_COMMIT`] counts them.
    fn writes(&self) -> usize {
        self.ops.iter().map(WriteOp::answers).sum()
    }

    /// Its commit must be synced (`store.sync: full`).
    fn durable(&self) -> bool {
        self.ops.iter().any(WriteOp::durable)
    }

    /// Retention's: committed alone, when nothing else waits.
    fn background(&self) -> bool {
        !self.ops.is_empty() && self.ops.iter().all(WriteOp::background)
    }
}

/// What waits for the writer, under one lock.
#[derive(Default)]
struct Backlog {
    jobs: VecDeque<Queued>,
    /// Retention's jobs ([`Queued::background`]), apart: each is committed
    /// alone, when `jobs` is empty or it has waited [`BACKGROUND_WAIT`], so
    /// no client's commit waits for a batch of deletes it is grouped with.
    background: VecDeque<Queued>,
    /// When the first of `background` began to wait.
    background_since: Option<Instant>,
    /// Writes in `jobs`.
    count: usize,
    /// Some job in `jobs` is urgent.
    urgent: bool,
    /// When the oldest job nobody waits for was queued.
    lazy_since: Option<Instant>,
    /// The thread waits on `wake`: `Some(true)` until a deadline (a lazy
    /// group's), `Some(false)` for good.
    thread_waits: Option<bool>,
    /// A runtime timer will wake the thread for the lazy jobs.
    timer_armed: bool,
    /// The last handle is gone: finish what is queued and stop.
    closed: bool,
    /// A commit on a caller's thread took the WAL past where the thread
    /// checkpoints: the thread runs it.
    checkpoint: bool,
    /// Callers are many: set to [`CROWDED`] when the thread takes a group
    /// with jobs of more than one caller who waits, one less for each group
    /// it takes with one. While it is not 0 commits go to the thread, where
    /// they share one (`commit::here`).
    crowded: u8,
}

impl Backlog {
    /// Takes up to [`WRITES_PER_COMMIT`] writes off the queue, oldest first
    /// (`on_thread`: for the thread, which counts how crowded it is); or,
    /// on the thread, one of retention's jobs alone, if nothing else is
    /// queued or it has waited [`BACKGROUND_WAIT`]. A caller's own commit
    /// never takes one.
    fn take(&mut self, on_thread: bool) -> Vec<(Vec<WriteOp>, Then)> {
        if on_thread
            && let Some(since) = self.background_since
            && (self.jobs.is_empty() || since.elapsed() >= BACKGROUND_WAIT)
            && let Some(job) = self.background.pop_front()
        {
            self.background_since = (!self.background.is_empty()).then(Instant::now);
            self.checkpoint = false;
            return vec![(job.ops, job.then)];
        }
        let mut group = Vec::new();
        let (mut count, mut waited) = (0, 0);
        while count < WRITES_PER_COMMIT
            && let Some(job) = self.jobs.pop_front()
        {
            count += job.writes();
            waited += usize::from(job.urgent);
            group.push((job.ops, job.then));
        }
        self.count -= count;
        self.checkpoint = false;
        if on_thread {
            self.crowded = match waited {
                0 => self.crowded,
                1 => self.crowded.saturating_sub(1),
                _ => CROWDED,
            };
        }
        self.settle();
        group
    }

    /// Whether a job left is urgent, and when the oldest lazy one came, once
    /// jobs have left the queue.
    fn settle(&mut self) {
        if self.jobs.is_empty() {
            self.urgent = false;
            self.lazy_since = None;
        } else {
            self.urgent = self.jobs.iter().any(|j| j.urgent);
        }
    }
}

struct Inner {
    queue: Mutex<Backlog>,
    wake: Condvar,
    /// The right to commit (`commit.rs`): the thread's, or a caller's that
    /// found it idle.
    conn: Mutex<commit::Conn>,
    durability: super::Durability,
    frames: Arc<WalFrames>,
    /// The last ticket handed out.
    tickets: AtomicU64,
    /// How long a caller waits before it withdraws its job (milliseconds;
    /// [`WRITE_DEADLINE`], shorter in tests that make the writer slow).
    deadline_ms: AtomicU64,
    /// Told after a commit that queued push deliveries (the deliverer
    /// waits on it instead of polling).
    pushes: Arc<tokio::sync::Notify>,
}

impl Inner {
    fn queue(&self) -> MutexGuard<'_, Backlog> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn conn(&self) -> MutexGuard<'_, commit::Conn> {
        self.conn.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Handle on the writer; the thread ends when the last handle is dropped.
#[derive(Clone)]
pub(super) struct TaskWriter(Arc<Handle>);

struct Handle(Arc<Inner>);

impl Drop for Handle {
    fn drop(&mut self) {
        self.0.queue().closed = true;
        self.0.wake.notify_one();
    }
}

impl TaskWriter {
    /// Opens a connection to the (migrated) database at `path` and starts
    /// the thread; `durability` is its `synchronous` level.
    pub(super) fn open(
        path: &Path,
        durability: super::Durability,
        frames: Arc<WalFrames>,
    ) -> Result<Self, WriteError> {
        let open = |e| WriteError::Open {
            path: path.to_path_buf(),
            source: Arc::new(e),
        };
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(open)?;
        conn.busy_timeout(Duration::from_secs(5))
            .and_then(|()| {
                conn.execute_batch(&format!(
                    "PRAGMA journal_mode = WAL; PRAGMA synchronous = {}; \
                     PRAGMA foreign_keys = ON; PRAGMA wal_autocheckpoint = 0; \
                     PRAGMA journal_size_limit = {}; PRAGMA temp_store = MEMORY;",
                    durability.pragma(),
                    WAL_SIZE_LIMIT,
                ))
            })
            .map_err(open)?;
        frames.count(&conn);
        let shared = Arc::new(Inner {
            queue: Mutex::new(Backlog::default()),
            wake: Condvar::new(),
            conn: Mutex::new(commit::Conn::new(conn, durability, frames.restart_at())),
            durability,
            frames,
            tickets: AtomicU64::new(0),
            deadline_ms: AtomicU64::new(WRITE_DEADLINE.as_millis() as u64),
            pushes: Arc::default(),
        });
        let thread = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("roost-store".into())
            .spawn(move || commit::serve(&thread))
            .map_err(|e| WriteError::Thread(Arc::new(e)))?;
        Ok(Self(Arc::new(Handle(shared))))
    }

    /// Told after each commit that queued push deliveries.
    pub(super) fn push_wake(&self) -> Arc<tokio::sync::Notify> {
        Arc::clone(&(self.0).0.pushes)
    }

    /// Commits `ops` (with whatever else is waiting) and answers for each, in order.
    pub(super) async fn write(&self, ops: Vec<WriteOp>) -> Result<Vec<Written>, WriteError> {
        let (reply, answer) = oneshot::channel();
        self.write_then(
            ops,
            Box::new(move |written| {
                let _ = reply.send(written);
            }),
            true,
        );
        deadline(answer).await
    }

    /// Queues `ops`; `then` runs on the thread with the answers once they
    /// are committed, after every job queued before it.
    ///
    /// `urgent`: somebody waits for it; the thread is woken if it sleeps.
    /// Not `urgent`: the commit may wait up to [`LINGER`] for company, and
    /// the thread is not woken for it (a runtime timer does that if no
    /// urgent job brings it along sooner): a lone blocking request then
    /// makes one hand-off to the thread instead of two.
    pub(super) fn write_then(&self, ops: Vec<WriteOp>, then: Then, urgent: bool) {
        self.queue(ops, then, urgent, 0, urgent);
    }

    /// Queues `ops` as [`TaskWriter::write_then`] does (urgent), committed
    /// on the writer's thread even when its caller could commit them: a
    /// `then` that blocks (a test's stall) must not block its caller.
    #[cfg(test)]
    pub(super) fn write_on_thread(&self, ops: Vec<WriteOp>, then: Then) {
        self.queue(ops, then, true, 0, false);
    }

    /// Queues `ops` as [`TaskWriter::write_then`] does (urgent), under a
    /// ticket its caller can [`TaskWriter::withdraw`] it by.
    pub(super) fn write_withdrawable(&self, ops: Vec<WriteOp>, then: Then) -> u64 {
        let ticket = self.0.0.tickets.fetch_add(1, Ordering::Relaxed) + 1;
        self.queue(ops, then, true, ticket, true);
        ticket
    }

    /// Takes the job of `ticket` off the queue if the thread has not taken
    /// it yet: `true` then, and nothing of it is ever written (its `then`
    /// never runs). `false`: it is being written, or has been.
    pub(super) fn withdraw(&self, ticket: u64) -> bool {
        let shared = &self.0.0;
        let mut q = shared.queue();
        let Some(at) = q.jobs.iter().position(|j| j.ticket == ticket) else {
            return false;
        };
        if let Some(job) = q.jobs.remove(at) {
            q.count -= job.writes();
        }
        q.settle();
        true
    }

    /// How long a caller waits for this writer before it gives up.
    pub(super) fn deadline(&self) -> Duration {
        Duration::from_millis(self.0.0.deadline_ms.load(Ordering::Relaxed))
    }

    /// A shorter deadline (tests that make the writer slow on purpose).
    #[cfg(test)]
    pub(super) fn set_deadline(&self, deadline: Duration) {
        (self.0)
            .0
            .deadline_ms
            .store(deadline.as_millis() as u64, Ordering::Relaxed);
    }

    /// `here`: the caller may commit it itself if the writer is idle
    /// (`commit::here`).
    fn queue(&self, ops: Vec<WriteOp>, then: Then, urgent: bool, ticket: u64, here: bool) {
        let shared = &self.0.0;
        let mut job = Queued {
            ops,
            then,
            urgent,
            ticket,
        };
        let background = job.background();
        if here && !background {
            match commit::here(shared, job) {
                None => return,
                Some(back) => job = back,
            }
        }
        let mut q = shared.queue();
        if background {
            q.background_since.get_or_insert_with(Instant::now);
            q.background.push_back(job);
            if q.thread_waits.is_some() {
                shared.wake.notify_one();
            }
            return;
        }
        q.count += job.writes();
        q.jobs.push_back(job);
        if urgent {
            q.urgent = true;
            // Awake, it takes this next with whatever else came in meanwhile
            // (under load, commits grow instead of multiplying).
            if q.thread_waits.is_some() {
                shared.wake.notify_one();
            }
            return;
        }
        q.lazy_since.get_or_insert_with(Instant::now);
        if q.thread_waits != Some(false) || q.timer_armed {
            // The thread is at work, or waits with a deadline, or a timer
            // will wake it.
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                q.timer_armed = true;
                rt.spawn(linger_timer(Arc::clone(shared)));
            }
            Err(_) => shared.wake.notify_one(),
        }
    }
}

/// Waits for a writer's answer for at most [`WRITE_DEADLINE`].
pub(super) async fn deadline<T>(answer: oneshot::Receiver<T>) -> Result<T, WriteError> {
    match tokio::time::timeout(WRITE_DEADLINE, answer).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(_)) => Err(WriteError::Stopped),
        Err(_) => Err(WriteError::Timeout),
    }
}

/// Wakes the thread once the oldest lazy job has waited [`LINGER`], unless
/// somebody has committed it by then.
async fn linger_timer(shared: Arc<Inner>) {
    let _disarm = Disarm(Arc::clone(&shared));
    loop {
        let due = match shared.queue().lazy_since {
            Some(since) if since + LINGER > Instant::now() => since + LINGER,
            _ => return,
        };
        tokio::time::sleep_until(due.into()).await;
    }
}

/// However a linger timer ends (due, or dropped with its runtime), the
/// thread hears of lazy jobs still queued: none waits on a timer that will
/// not fire.
struct Disarm(Arc<Inner>);

impl Drop for Disarm {
    fn drop(&mut self) {
        let mut q = self.0.queue();
        q.timer_armed = false;
        if q.lazy_since.is_some() && q.thread_waits.is_some() {
            self.0.wake.notify_one();
        }
    }
}
