//! `trace.jsonl`: one JSON object per line in the session's bookkeeping dir,
//! buffered and flushed at each task end and at session end.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

/// File name of the trace in a session's bookkeeping dir.
pub const TRACE_FILE: &str = "trace.jsonl";

/// A buffer is written out early past this size, so a long task cannot grow it without bound.
const FLUSH_AT: usize = 64 * 1024;

/// Appends events to one session's trace.
pub struct Trace {
    /// The session's workdir: no link below it is followed (crate::fsx).
    root: PathBuf,
    path: PathBuf,
    session_id: String,
    buffer: Vec<u8>,
}

impl Trace {
    pub fn new(root: &Path, bookkeeping: &Path, session_id: &str) -> Self {
        Self {
            root: root.to_path_buf(),
            path: bookkeeping.join(TRACE_FILE),
            session_id: session_id.to_string(),
            buffer: Vec::new(),
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
        let written = tokio::task::spawn_blocking(move || {
            use std::io::Write;
            crate::fsx::append(&root, &path)?.write_all(&buffer)
        })
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e)));
        if let Err(error) = written {
            tracing::warn!(path = %self.path.display(), %error, "cannot write trace");
        }
        self.buffer.clear();
    }
}
