//! A session's guest output by line (`roostctl logs --tail/--since/
//! --timestamps/--json`): each line gets the time and stream of the write
//! its first byte came in, from the marks the sink keeps beside each log
//! generation (`guest.log.idx`, `guest.log.idx.1`). Lines written before
//! there was an index take the log file's modification time.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use super::{GUEST_INDEX, GUEST_LOG, rotated_path};

const MARK_BYTES: usize = 16;
const STDERR_BIT: u64 = 1 << 63;

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Where a write began in its log file, when, and from which stream:
/// 8 bytes of offset, 8 of milliseconds with the top bit for stderr (LE).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark {
    offset: u64,
    ms: u64,
    stderr: bool,
}

impl Mark {
    pub fn new(offset: u64, ms: u64, stderr: bool) -> Self {
        Self { offset, ms, stderr }
    }

    pub fn encode(&self) -> [u8; MARK_BYTES] {
        let mut out = [0; MARK_BYTES];
        out[..8].copy_from_slice(&self.offset.to_le_bytes());
        let word = (self.ms & !STDERR_BIT) | if self.stderr { STDERR_BIT } else { 0 };
        out[8..].copy_from_slice(&word.to_le_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Option<Self> {
        let offset = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?);
        let word = u64::from_le_bytes(bytes.get(8..MARK_BYTES)?.try_into().ok()?);
        Some(Self {
            offset,
            ms: word & !STDERR_BIT,
            stderr: word & STDERR_BIT != 0,
        })
    }
}

/// One line of output (without its newline).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub ms: u64,
    pub stderr: bool,
    pub text: Vec<u8>,
}

impl Line {
    /// As `logs` sends it: the text (after its time with `timestamps`), or a
    /// JSON line (`roost_wire::api::LogLine`).
    pub fn render(&self, timestamps: bool, json: bool) -> Vec<u8> {
        let time = || {
            let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(self.ms);
            humantime::format_rfc3339_millis(at).to_string()
        };
        if json {
            let line = roost_wire::api::LogLine {
                time: time(),
                stream: if self.stderr { "stderr" } else { "stdout" }.to_string(),
                line: String::from_utf8_lossy(&self.text).into_owned(),
            };
            let mut out = serde_json::to_vec(&line).unwrap_or_default();
            out.push(b'\n');
            return out;
        }
        let mut out = Vec::with_capacity(self.text.len() + 32);
        if timestamps {
            out.extend_from_slice(time().as_bytes());
            out.push(b' ');
        }
        out.extend_from_slice(&self.text);
        out.push(b'\n');
        out
    }
}

/// Splits `log` (one generation, starting at file offset `base`) into
/// lines. With `whole_only`, a last line without its newline is left out;
/// returns the lines and how many bytes they took.
fn split(
    log: &[u8],
    base: u64,
    marks: &[Mark],
    fallback_ms: u64,
    whole_only: bool,
) -> (Vec<Line>, usize) {
    let mut lines = Vec::new();
    let mut start = 0;
    while start < log.len() {
        let end = match log[start..].iter().position(|b| *b == b'\n') {
            Some(i) => start + i,
            None if whole_only => break,
            None => log.len(),
        };
        let at = base + start as u64;
        let mark = marks.iter().rev().find(|m| m.offset <= at);
        lines.push(Line {
            ms: mark.map_or(fallback_ms, |m| m.ms),
            stderr: mark.is_some_and(|m| m.stderr),
            text: log[start..end].to_vec(),
        });
        start = (end + 1).min(log.len());
    }
    (lines, start)
}

fn decode_all(bytes: &[u8]) -> Vec<Mark> {
    bytes
        .chunks_exact(MARK_BYTES)
        .filter_map(Mark::decode)
        .collect()
}

fn modified_ms(root: &Path, path: &Path) -> u64 {
    crate::fsx::open_read(root, path)
        .and_then(|f| f.metadata())
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(0))
}

/// Every line kept of a session's output (the rotated generation, then the
/// live one), with its time and stream; a line cut by a rotation is one line.
#[cfg(test)]
pub fn read_all(root: &Path, dir: &Path) -> Vec<Line> {
    read_recent(root, dir, u64::MAX)
}

/// The lines of the last `max_bytes` of a session's output (the rotated
/// generation, then the live one), with their times and streams: what is
/// read stays bounded however large a file has grown (a WASM guest can
/// write the files in its workdir directly). A line cut by a rotation is
/// one line; the first line may be cut by the bound.
pub fn read_recent(root: &Path, dir: &Path, max_bytes: u64) -> Vec<Line> {
    let len = |path: &Path| inode_and_len(root, path).map_or(0, |(_, len)| len);
    let (live_log, live_index) = (dir.join(GUEST_LOG), dir.join(GUEST_INDEX));
    let live_len = len(&live_log);
    let (log, index) = (rotated_path(dir), dir.join(format!("{GUEST_INDEX}.1")));
    let rotated_from = len(&log).saturating_sub(max_bytes.saturating_sub(live_len));
    let mut reader = Follower::new(root, dir, None, rotated_from, index_from(len(&index)));
    reader.max_read = max_bytes;
    let mut lines = reader.read(&log, &index, true, modified_ms(root, &log));
    reader.next_generation();
    let live_from = live_len.saturating_sub(max_bytes);
    if live_from > 0 {
        // Nothing of the rotated generation, nor the line it left pending.
        lines.clear();
        reader.pending.clear();
        reader.log_offset = live_from;
        reader.pending_at = live_from;
    }
    reader.index_offset = index_from(len(&live_index));
    lines.extend(reader.read(&live_log, &live_index, false, modified_ms(root, &live_log)));
    lines
}

/// Where to start reading an index so that at most [`MAX_INDEX_READ`] of
/// it is read (whole marks only).
fn index_from(len: u64) -> u64 {
    let from = len.saturating_sub(MAX_INDEX_READ);
    from - from % MARK_BYTES as u64
}

/// The most of an index one read takes (the marks of the last lines).
const MAX_INDEX_READ: u64 = 4 << 20;

/// The most of a log one follower poll takes; the rest comes next poll.
const MAX_POLL_READ: u64 = 4 << 20;

/// Keeps the lines `tail` and `since_ms` ask for.
pub fn select(mut lines: Vec<Line>, tail: Option<u64>, since_ms: Option<u64>) -> Vec<Line> {
    if let Some(since) = since_ms {
        lines.retain(|l| l.ms >= since);
    }
    if let Some(tail) = tail {
        let keep = usize::try_from(tail).unwrap_or(usize::MAX);
        let drop = lines.len().saturating_sub(keep);
        lines.drain(..drop);
    }
    lines
}

/// Reads the log line by line from a place in it, across rotations (the
/// rest of a rotated generation is read from `guest.log.1`): [`read_all`]
/// from the start, a follower (`logs -f`) from the end.
pub struct Follower {
    root: PathBuf,
    dir: PathBuf,
    /// The live file being read (its inode), once there is one.
    inode: Option<u64>,
    /// Offsets read so far in the current generation's log and index.
    log_offset: u64,
    index_offset: u64,
    /// Added to the current generation's offsets: the length of a line
    /// carried over from the generation before, so offsets keep growing.
    shift: u64,
    /// Marks read so far (offsets shifted): the last one before the
    /// pending line, and every one after it.
    marks: Vec<Mark>,
    /// Bytes of a line whose newline has not come yet, and where it began
    /// (shifted).
    pending: Vec<u8>,
    pending_at: u64,
    /// The most of a log one read takes ([`MAX_POLL_READ`] for a
    /// follower; a bounded range is read whole).
    max_read: u64,
}

fn inode_and_len(root: &Path, path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let meta = crate::fsx::open_read(root, path)
        .and_then(|f| f.metadata())
        .ok()?;
    Some((meta.ino(), meta.len()))
}

impl Follower {
    fn new(
        root: &Path,
        dir: &Path,
        inode: Option<u64>,
        log_offset: u64,
        index_offset: u64,
    ) -> Self {
        Self {
            root: root.to_path_buf(),
            dir: dir.to_path_buf(),
            inode,
            log_offset,
            index_offset: index_offset - index_offset % MARK_BYTES as u64,
            shift: 0,
            marks: Vec::new(),
            pending: Vec::new(),
            pending_at: log_offset,
            max_read: MAX_POLL_READ,
        }
    }

    /// A follower of what is written from now on.
    pub fn at_end(root: &Path, dir: &Path) -> Self {
        let live = inode_and_len(root, &dir.join(GUEST_LOG));
        let index = inode_and_len(root, &dir.join(GUEST_INDEX)).map_or(0, |(_, len)| len);
        Self::new(
            root,
            dir,
            live.map(|(inode, _)| inode),
            live.map_or(0, |(_, len)| len),
            index,
        )
    }

    fn rotated(&self) -> (PathBuf, PathBuf) {
        (
            rotated_path(&self.dir),
            self.dir.join(format!("{GUEST_INDEX}.1")),
        )
    }

    /// The lines completed since the last call; with `flush`, also a last
    /// line without its newline (the session has ended).
    pub fn poll(&mut self, flush: bool) -> Vec<Line> {
        let live = self.dir.join(GUEST_LOG);
        let mut lines = Vec::new();
        match inode_and_len(&self.root, &live) {
            Some((inode, _)) if self.inode.is_some_and(|i| i != inode) => {
                // Rotated: first the rest of the old generation.
                let (log, index) = self.rotated();
                lines.extend(self.read(&log, &index, true, now_ms()));
                self.next_generation();
                self.inode = Some(inode);
            }
            Some((inode, _)) => self.inode = Some(inode),
            None => {}
        }
        let index = self.dir.join(GUEST_INDEX);
        lines.extend(self.read(&live, &index, !flush, now_ms()));
        lines
    }

    /// From one generation to the next: offsets start again, a line left
    /// pending continues (with the mark it began under).
    fn next_generation(&mut self) {
        let carried = self
            .marks
            .iter()
            .rev()
            .find(|m| m.offset <= self.pending_at)
            .copied();
        self.shift = self.pending.len() as u64;
        self.pending_at = 0;
        self.log_offset = 0;
        self.index_offset = 0;
        self.marks = carried
            .map(|m| Mark { offset: 0, ..m })
            .into_iter()
            .collect();
    }

    /// New lines of one generation from where this reader is in it; lines
    /// without a mark get `fallback_ms`.
    fn read(&mut self, log: &Path, index: &Path, whole_only: bool, fallback_ms: u64) -> Vec<Line> {
        self.read_marks(index);
        let mut fresh = Vec::new();
        if let Ok(mut file) = crate::fsx::open_read(&self.root, log)
            && file.seek(SeekFrom::Start(self.log_offset)).is_ok()
        {
            let _ = file.take(self.max_read).read_to_end(&mut fresh);
        }
        if self.pending.is_empty() {
            self.pending_at = self.log_offset + self.shift;
        }
        self.log_offset += fresh.len() as u64;
        self.pending.extend_from_slice(&fresh);
        let (lines, used) = split(
            &self.pending,
            self.pending_at,
            &self.marks,
            fallback_ms,
            whole_only,
        );
        self.pending.drain(..used);
        self.pending_at += used as u64;
        if let Some(keep) = self.marks.iter().rposition(|m| m.offset <= self.pending_at) {
            self.marks.drain(..keep);
        }
        lines
    }

    fn read_marks(&mut self, index: &Path) {
        let Ok(mut file) = crate::fsx::open_read(&self.root, index) else {
            return;
        };
        if file.seek(SeekFrom::Start(self.index_offset)).is_err() {
            return;
        }
        let mut bytes = Vec::new();
        let _ = file.take(MAX_INDEX_READ).read_to_end(&mut bytes);
        let whole = bytes.len() - bytes.len() % MARK_BYTES;
        let shift = self.shift;
        self.marks
            .extend(decode_all(&bytes[..whole]).into_iter().map(|m| Mark {
                offset: m.offset + shift,
                ..m
            }));
        self.index_offset += whole as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::super::{LogSink, Stream};
    use super::*;

    #[test]
    fn lines_carry_the_time_and_stream_of_their_first_byte_across_rotation_and_follow() {
        let dir = tempfile::tempdir().expect("tempdir");
        let sink = LogSink::new(dir.path(), 1024);
        let before = now_ms();
        sink.write(Stream::Stdout, b"one\ntw");
        sink.write(Stream::Stderr, b"o\nthree\n");
        let lines = read_all(dir.path(), dir.path());
        let texts: Vec<&[u8]> = lines.iter().map(|l| l.text.as_slice()).collect();
        assert_eq!(texts, [&b"one"[..], b"two", b"three"]);
        // "two" began on stdout; "three" on stderr.
        assert_eq!(
            lines.iter().map(|l| l.stderr).collect::<Vec<_>>(),
            [false, false, true]
        );
        assert!(lines.iter().all(|l| l.ms >= before && l.ms <= now_ms()));
        assert_eq!(select(lines.clone(), Some(1), None).len(), 1);
        assert!(select(lines, None, Some(now_ms() + 60_000)).is_empty());

        let mut follower = Follower::at_end(dir.path(), dir.path());
        sink.write(Stream::Stdout, b"four\nfi");
        let got = follower.poll(false);
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].text, b"four");
        // Past 1 KiB the log rotates under the follower; nothing is lost.
        let long = vec![b'x'; 1000];
        sink.write(Stream::Stdout, b"ve\n");
        sink.write(Stream::Stdout, &long);
        sink.write(Stream::Stdout, b"\nlast");
        let got = follower.poll(true);
        let texts: Vec<Vec<u8>> = got.into_iter().map(|l| l.text).collect();
        assert_eq!(
            texts,
            vec![b"five".to_vec(), long.clone(), b"last".to_vec()]
        );
        // Read from the start, the line cut by the rotation is one line too.
        let all: Vec<Vec<u8>> = read_all(dir.path(), dir.path())
            .into_iter()
            .map(|l| l.text)
            .collect();
        assert_eq!(all[all.len() - 2..], [long, b"last".to_vec()]);
        let rendered = String::from_utf8(
            Line {
                ms: 1_764_633_600_000,
                stderr: true,
                text: b"hi".to_vec(),
            }
            .render(true, false),
        )
        .expect("utf-8");
        assert_eq!(rendered, "2025-12-02T00:00:00.000Z hi\n");
    }
}
