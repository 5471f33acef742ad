//! Per-session guest output capture: a size-bounded `guest.log` rotated to
//! `guest.log.1`, with a time index beside each (`guest.log.idx`: when and
//! from which stream each write began, read back by line in `lines.rs`),
//! plus an in-memory tail of stderr used to explain traps.

pub mod lines;

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Name of the live log file inside a session's bookkeeping `logs/` dir.
pub const GUEST_LOG: &str = "guest.log";
/// Its time index: 16-byte marks (`lines::Mark`).
pub const GUEST_INDEX: &str = "guest.log.idx";
/// How much of the most recent stderr is kept in memory for error messages.
const STDERR_TAIL_BYTES: usize = 4096;

/// Which guest stream a write came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// A cloneable handle that every stream of one session writes through.
#[derive(Clone)]
pub struct LogSink {
    inner: Arc<Mutex<SinkInner>>,
}

struct SinkInner {
    /// The session's workdir: nothing below it is trusted not to be a link.
    root: PathBuf,
    dir: PathBuf,
    file: Option<File>,
    /// The time index of `file` (none when it could not be opened: lines
    /// then read without times).
    index: Option<File>,
    /// The last mark written: (milliseconds, stderr).
    last_mark: Option<(u64, bool)>,
    /// The log could not be opened safely (say, a tool put a link in its
    /// place): said once, not retried on every write.
    refused: bool,
    written: u64,
    max_bytes: u64,
    stderr_tail: Vec<u8>,
}

impl LogSink {
    /// A sink appending to `<dir>/guest.log`, created on the first write (a
    /// silent guest costs no files); `max_bytes` bounds each file, so at most
    /// twice that is kept on disk.
    pub fn new(dir: &Path, max_bytes: u64) -> Self {
        Self::within(dir, dir, max_bytes)
    }

    /// A sink whose `dir` lies below `root` (the session's workdir), reached
    /// without following any link below `root` (see [`crate::fsx`]).
    pub fn within(root: &Path, dir: &Path, max_bytes: u64) -> Self {
        Self {
            inner: Arc::new(Mutex::new(SinkInner {
                root: root.to_path_buf(),
                dir: dir.to_path_buf(),
                file: None,
                index: None,
                last_mark: None,
                refused: false,
                written: 0,
                max_bytes: max_bytes.max(1024),
                stderr_tail: Vec::new(),
            })),
        }
    }

    /// Appends guest output; failures to write are dropped (a full disk must not
    /// crash the guest), but rotation keeps the file bounded.
    pub fn write(&self, stream: Stream, bytes: &[u8]) {
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        if stream == Stream::Stderr {
            inner.stderr_tail.extend_from_slice(bytes);
            let len = inner.stderr_tail.len();
            if len > STDERR_TAIL_BYTES {
                inner.stderr_tail.drain(..len - STDERR_TAIL_BYTES);
            }
        }
        if inner.file.is_none() {
            inner.open();
        }
        if inner.written + bytes.len() as u64 > inner.max_bytes && inner.written > 0 {
            inner.rotate();
        }
        inner.mark(stream == Stream::Stderr);
        if let Some(file) = inner.file.as_mut()
            && file.write_all(bytes).is_ok()
        {
            inner.written += bytes.len() as u64;
        }
    }

    /// The last lines the guest wrote to stderr, joined with spaces, without
    /// Rust's "run with RUST_BACKTRACE" hint.
    pub fn stderr_tail(&self) -> String {
        let Ok(inner) = self.inner.lock() else {
            return String::new();
        };
        let text = String::from_utf8_lossy(&inner.stderr_tail);
        let lines: Vec<&str> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with("note: run with `RUST_BACKTRACE"))
            .collect();
        let start = lines
            .iter()
            .rposition(|l| l.contains("panicked at"))
            .unwrap_or(lines.len().saturating_sub(3));
        lines[start..].join(" ")
    }
}

impl SinkInner {
    fn open(&mut self) {
        if self.refused {
            return;
        }
        match crate::fsx::append(&self.root, &self.dir.join(GUEST_LOG)) {
            Ok(file) => {
                self.written = file.metadata().map(|m| m.len()).unwrap_or(0);
                self.file = Some(file);
                self.index = crate::fsx::append(&self.root, &self.dir.join(GUEST_INDEX)).ok();
                self.last_mark = None;
            }
            Err(error) => {
                self.refused = true;
                tracing::warn!(%error, "guest output is not written to the log");
            }
        }
    }

    fn rotate(&mut self) {
        self.file = None;
        self.index = None;
        let _ = crate::fsx::rename(
            &self.root,
            &self.dir.join(GUEST_LOG),
            &rotated_path(&self.dir),
        );
        let _ = crate::fsx::rename(
            &self.root,
            &self.dir.join(GUEST_INDEX),
            &self.dir.join(format!("{GUEST_INDEX}.1")),
        );
        self.open();
    }

    /// Notes when (to the millisecond) and from which stream the bytes
    /// about to be written at `written` begin, unless the last mark says so.
    fn mark(&mut self, stderr: bool) {
        let ms = lines::now_ms();
        if self.last_mark == Some((ms, stderr)) {
            return;
        }
        if let Some(index) = self.index.as_mut()
            && index
                .write_all(&lines::Mark::new(self.written, ms, stderr).encode())
                .is_ok()
        {
            self.last_mark = Some((ms, stderr));
        }
    }
}

fn rotated_path(dir: &Path) -> PathBuf {
    dir.join(format!("{GUEST_LOG}.1"))
}

/// Reads the last `max_bytes` of a session's log: of the rotated file, then
/// the live one (bounded whatever size a guest grew them to).
pub fn read_recent(root: &Path, dir: &Path, max_bytes: u64) -> std::io::Result<Vec<u8>> {
    use std::io::{Read, Seek, SeekFrom};
    let mut parts = Vec::new();
    let mut budget = max_bytes;
    // The live file's end first, then what budget is left of the rotated one.
    for path in [dir.join(GUEST_LOG), rotated_path(dir)] {
        let mut file = match crate::fsx::open_read(root, &path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        let len = file.metadata()?.len();
        let take = len.min(budget);
        file.seek(SeekFrom::Start(len - take))?;
        let mut bytes = Vec::new();
        file.take(take).read_to_end(&mut bytes)?;
        budget -= take;
        parts.push(bytes);
    }
    parts.reverse();
    Ok(parts.concat())
}

/// The live log file's path (what `logs -f` follows).
pub fn live_path(dir: &Path) -> PathBuf {
    dir.join(GUEST_LOG)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotation_bounds_the_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let sink = LogSink::new(dir.path(), 1024);
        for i in 0..1000 {
            sink.write(
                Stream::Stdout,
                format!("line {i:04} ..........\n").as_bytes(),
            );
        }
        let live = std::fs::metadata(dir.path().join(GUEST_LOG))
            .expect("live")
            .len();
        let old = std::fs::metadata(rotated_path(dir.path()))
            .expect("rotated")
            .len();
        assert!(live <= 1024 && old <= 1024, "{live} {old}");
        let all = read_recent(dir.path(), dir.path(), u64::MAX).expect("read");
        let all = String::from_utf8(all).expect("utf8");
        assert!(all.ends_with("line 0999 ..........\n"));
        assert!(!all.contains("line 0000"));
    }

    /// A guest that writes its log file directly (past the sink's bound):
    /// readers take the last bytes they ask for, not the whole file. The
    /// control: the whole file is that large.
    #[test]
    fn readers_take_a_bounded_tail_of_an_overgrown_log() {
        let dir = tempfile::tempdir().expect("tempdir");
        let sink = LogSink::new(dir.path(), 1024);
        sink.write(Stream::Stdout, b"from the sink\n");
        let mut big = Vec::new();
        for i in 0..200_000 {
            big.extend_from_slice(format!("written directly {i:06}\n").as_bytes());
        }
        std::fs::write(dir.path().join(GUEST_LOG), &big).expect("grow");
        assert!(
            big.len() > 4 << 20,
            "the control: {} bytes on disk",
            big.len()
        );
        let tail = read_recent(dir.path(), dir.path(), 4096).expect("read");
        assert_eq!(tail.len(), 4096);
        assert!(String::from_utf8_lossy(&tail).ends_with("written directly 199999\n"));
        let lines = lines::read_recent(dir.path(), dir.path(), 4096);
        assert!(lines.len() <= 4096 / 23 + 1, "{} lines", lines.len());
        let last = lines.last().expect("a line");
        assert_eq!(last.text, b"written directly 199999");
    }

    #[test]
    fn stderr_tail_keeps_the_panic_message() {
        let dir = tempfile::tempdir().expect("tempdir");
        let sink = LogSink::new(dir.path(), 1 << 20);
        sink.write(
            Stream::Stderr,
            b"noise\n\nthread '<unnamed>' panicked at src/lib.rs:5:5:\n",
        );
        sink.write(
            Stream::Stderr,
            b"boom\nnote: run with `RUST_BACKTRACE=1` environment variable\n",
        );
        assert_eq!(
            sink.stderr_tail(),
            "thread '<unnamed>' panicked at src/lib.rs:5:5: boom"
        );
    }
}
