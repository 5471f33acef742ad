//! The WAL's length as the writer's commits leave it (counted by SQLite's
//! WAL hook), the bounds on it, and a PASSIVE checkpoint; shared by the
//! writer (`writer.rs`) and the checkpoint thread (`checkpointer.rs`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rusqlite::Connection;

/// Bytes the WAL file is trimmed to when it starts over
/// (`journal_size_limit`; see `checkpointer.rs`).
pub(super) const WAL_SIZE_LIMIT: u64 = 256 << 20;

/// Frames in the WAL past which the writer runs a checkpoint itself (256
/// MiB of 4 KiB pages, the `journal_size_limit`). Each holds every commit
/// while it syncs what the WAL took since the last background pass, and
/// the database file: a few ms when idle, 30–60 ms under full load on this
/// VM's disk, where 64 MiB came every ~0.3 s and the stalls were the
/// slowest 1 % at 128 clients (BENCHMARKS.md, issue 36). So they are kept
/// rare.
pub(super) const RESTART_FRAMES: u64 = WAL_SIZE_LIMIT / 4096;

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
