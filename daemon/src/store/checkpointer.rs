//! WAL checkpoints on a thread and a connection of their own: a PASSIVE
//! checkpoint copies committed pages back into the database file while the
//! writer goes on committing (it never waits for a checkpoint's write back
//! and sync). It runs every second, and every 50 ms while it finds the WAL
//! behind or long, so that it stays close behind the writer under load.
//!
//! The WAL starts over from the top only when a checkpoint has reached its
//! end before the writer's next commit — which, under steady load, a
//! checkpoint beside the writer never does (measured: 390 MB of WAL after
//! 1.5 s of steady writes). So the writer finishes the job itself: once its
//! commits have taken the WAL past [`RESTART_FRAMES`] (SQLite's WAL hook
//! counts them, [`WalFrames`]), it runs one PASSIVE checkpoint between two
//! commits (only what was committed since this thread's last pass, but with
//! two syncs: a few ms, measured in BENCHMARKS.md), its next commit starts
//! the WAL over, and `journal_size_limit` trims the file.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};
use tokio::sync::oneshot;

use super::writer::WriteError;

/// A checkpoint runs at least this often, asked for or not.
const EVERY: Duration = Duration::from_secs(1);

/// How soon the next checkpoint runs while the WAL has frames to copy or
/// is past [`BUSY_FRAMES`].
const BEHIND: Duration = Duration::from_millis(50);

/// A WAL this long (4 MiB) means the writer is busy.
const BUSY_FRAMES: u64 = 1024;

/// Frames in the WAL past which the writer runs a checkpoint itself (64 MiB
/// of 4 KiB pages, the `journal_size_limit`). Each costs the writer a few
/// milliseconds (measured: syncing what the WAL took since the last
/// background pass, and the database file), so they are kept rare.
pub(super) const RESTART_FRAMES: u64 = super::writer::WAL_SIZE_LIMIT / 4096;

/// Frames in the WAL after the writer's last commit, and how many make the
/// writer checkpoint ([`RESTART_FRAMES`]).
#[derive(Debug)]
pub(super) struct WalFrames {
    frames: AtomicU64,
    pub(super) restart_at: AtomicU64,
}

impl Default for WalFrames {
    fn default() -> Self {
        Self {
            frames: AtomicU64::new(0),
            restart_at: AtomicU64::new(RESTART_FRAMES),
        }
    }
}

impl WalFrames {
    pub(super) fn get(&self) -> u64 {
        self.frames.load(Ordering::Relaxed)
    }

    pub(super) fn restart_at(&self) -> u64 {
        self.restart_at.load(Ordering::Relaxed)
    }

    /// Has SQLite count the WAL's frames after each commit of `conn` (its
    /// WAL hook, which also turns auto-checkpoints off: they are off anyway).
    pub(super) fn count(self: &Arc<Self>, conn: &Connection) {
        unsafe extern "C" fn hook(
            arg: *mut std::ffi::c_void,
            _db: *mut rusqlite::ffi::sqlite3,
            _name: *const std::ffi::c_char,
            frames: std::ffi::c_int,
        ) -> std::ffi::c_int {
            // SAFETY: `arg` is a `WalFrames` that is never freed (below).
            let counter = unsafe { &*arg.cast::<WalFrames>() };
            counter
                .frames
                .store(u64::try_from(frames).unwrap_or(0), Ordering::Relaxed);
            rusqlite::ffi::SQLITE_OK
        }
        // Leaked on purpose (one per store): the hook may run as long as
        // the connection lives, whoever drops what first.
        let arg = Arc::into_raw(Arc::clone(self)).cast_mut().cast();
        // SAFETY: the handle is the live connection's; `hook` matches the
        // callback type and `arg` stays valid for ever.
        unsafe { rusqlite::ffi::sqlite3_wal_hook(conn.handle(), Some(hook), arg) };
    }
}

/// `PRAGMA wal_checkpoint(PASSIVE)`: frames in the WAL and frames copied.
pub(super) fn passive(conn: &Connection) -> rusqlite::Result<(u64, u64)> {
    conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| {
        Ok((
            row.get::<_, i64>(1)?.max(0) as u64,
            row.get::<_, i64>(2)?.max(0) as u64,
        ))
    })
}

type Reply = oneshot::Sender<Result<(), WriteError>>;

/// Handle on the checkpoint thread; it ends when the last handle goes.
#[derive(Clone)]
pub(super) struct Checkpointer(Arc<std::sync::Mutex<mpsc::Sender<Reply>>>);

impl Checkpointer {
    pub(super) fn open(path: &Path) -> Result<Self, WriteError> {
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .and_then(|conn| {
            conn.busy_timeout(Duration::from_secs(5))?;
            conn.execute_batch("PRAGMA wal_autocheckpoint = 0;")?;
            Ok(conn)
        })
        .map_err(|e| WriteError::Open {
            path: path.to_path_buf(),
            source: Arc::new(e),
        })?;
        let (tx, rx) = mpsc::channel::<Reply>();
        std::thread::Builder::new()
            .name("roost-checkpoint".into())
            .spawn(move || run(&conn, &rx))
            .map_err(|e| WriteError::Thread(Arc::new(e)))?;
        Ok(Self(Arc::new(std::sync::Mutex::new(tx))))
    }

    /// A PASSIVE checkpoint now (it does not wait for readers or writers).
    pub(super) async fn checkpoint(&self) -> Result<(), WriteError> {
        let (reply, answer) = oneshot::channel();
        let sent = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .send(reply);
        if sent.is_err() {
            return Err(WriteError::Stopped);
        }
        super::writer::deadline(answer).await?
    }
}

fn run(conn: &Connection, requests: &mpsc::Receiver<Reply>) {
    let mut wait = EVERY;
    loop {
        let reply = match requests.recv_timeout(wait) {
            Ok(reply) => Some(reply),
            Err(mpsc::RecvTimeoutError::Timeout) => None,
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        };
        let done = passive(conn).map_err(|e| WriteError::Checkpoint(Arc::new(e)));
        // Under load (the WAL growing), close behind the writer, so that
        // the writer's own checkpoint has little left to copy.
        wait = match &done {
            Ok((log, copied)) if copied < log || *log >= BUSY_FRAMES => BEHIND,
            _ => EVERY,
        };
        if let Err(error) = &done
            && reply.is_none()
        {
            tracing::warn!(%error, "WAL checkpoint failed");
        }
        if let Some(reply) = reply {
            let _ = reply.send(done.map(drop));
        }
    }
}
