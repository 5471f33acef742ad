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
//! commits have taken the WAL past `wal::RESTART_FRAMES` (SQLite's WAL hook
//! counts them, `wal::WalFrames`), it runs one PASSIVE checkpoint between two
//! commits (only what was committed since this thread's last pass, but with
//! two syncs: a few ms, measured in BENCHMARKS.md), its next commit starts
//! the WAL over, and `journal_size_limit` trims the file.

use std::path::Path;
use std::sync::Arc;
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
        let done = super::wal::passive(conn).map_err(|e| WriteError::Checkpoint(Arc::new(e)));
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
