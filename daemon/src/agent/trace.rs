//! `trace.jsonl`: one JSON object per line in the session's bookkeeping dir,
//! buffered and flushed at each task end and at session end; past
//! `retention.trace.max_bytes` it is rotated to `trace.1.jsonl` (the one
//! before is dropped).

use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

/// File name of the trace in a session's bookkeeping dir.
pub const TRACE_FILE: &str = "trace.jsonl";

/// What the trace is rotated to.
pub const ROTATED_FILE: &str = "trace.1.jsonl";

/// A buffer is written out early past this size, so a long task cannot grow it without bound.
const FLUSH_AT: usize = 64 * 1024;

/// Appends events to one session's trace.
pub struct Trace {
    /// The session's workdir: no link below it is followed (crate::fsx).
    root: PathBuf,
    path: PathBuf,
    session_id: String,
    buffer: Vec<u8>,
    /// Rotated past this size (0: never).
    max_bytes: u64,
}

impl Trace {
    pub fn new(root: &Path, bookkeeping: &Path, session_id: &str, max_bytes: u64) -> Self {
        Self {
            root: root.to_path_buf(),
            path: bookkeeping.join(TRACE_FILE),
            session_id: session_id.to_string(),
            buffer: Vec::new(),
            max_bytes,
        }
    }

    /// Adds one event: `{"ts", "event", "session_id", …fields}`.
    pub async fn event(&mut self, event: &str, fields: Value) {
        let mut line = Map::new();
        line.insert("ts".into(), json!(crate::store::now()));
        line.insert("event".into(), json!(event));
        line.insert("session_id".into(), json!(self.session_id));
        if let Value::Object(fields) = fields {
            line.extend(fields);
        }
        if serde_json::to_writer(&mut self.buffer, &Value::Object(line)).is_ok() {
            self.buffer.push(b'\n');
        }
        if self.buffer.len() >= FLUSH_AT {
            // Boxed: every caller's future would otherwise carry the file I/O.
            Box::pin(self.flush()).await;
        }
    }

    /// Writes buffered events to the file (a failure is logged; the session goes on).
    pub async fn flush(&mut self) {
        if self.buffer.is_empty() {
            return;
        }
        // Never through a link (or a hard link) a tool may have planted in the
        // bookkeeping dir.
        let (root, path) = (self.root.clone(), self.path.clone());
        let buffer = std::mem::take(&mut self.buffer);
        let max_bytes = self.max_bytes;
        let written = tokio::task::spawn_blocking(move || {
            use std::io::Write;
            let mut file = crate::fsx::append(&root, &path)?;
            let size = file.metadata()?.len();
            if max_bytes > 0 && size > 0 && size + buffer.len() as u64 > max_bytes {
                drop(file);
                crate::fsx::rename(&root, &path, &path.with_file_name(ROTATED_FILE))?;
                file = crate::fsx::append(&root, &path)?;
            }
            file.write_all(&buffer)
        })
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e)));
        if let Err(error) = written {
            tracing::warn!(path = %self.path.display(), %error, "cannot write trace");
        }
        self.buffer.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn past_its_bound_the_trace_is_rotated_once() {
        let dir = tempfile::tempdir().expect("dir");
        let mut trace = Trace::new(dir.path(), dir.path(), "ses_t", 400);
        for round in 0..3 {
            for i in 0..3 {
                trace.event("turn", json!({"round": round, "i": i})).await;
            }
            trace.flush().await;
        }
        let current = std::fs::read_to_string(dir.path().join(TRACE_FILE)).expect("trace");
        let rotated = std::fs::read_to_string(dir.path().join(ROTATED_FILE)).expect("rotated");
        assert!(current.len() <= 400, "{}", current.len());
        assert!(current.contains(r#""round":2"#), "{current}");
        assert!(rotated.contains(r#""round":1"#), "{rotated}");
        assert!(!rotated.contains(r#""round":0"#), "one rotated file only");
        for line in current.lines().chain(rotated.lines()) {
            serde_json::from_str::<Value>(line).expect("whole lines");
        }
    }
}
