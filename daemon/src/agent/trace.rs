//! `trace.jsonl`: one JSON object per line in the session's bookkeeping dir,
//! buffered and flushed at each task end and at session end.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};
use tokio::io::AsyncWriteExt;

/// File name of the trace in a session's bookkeeping dir.
pub const TRACE_FILE: &str = "trace.jsonl";

/// A buffer is written out early past this size, so a long task cannot grow it without bound.
const FLUSH_AT: usize = 64 * 1024;

/// Appends events to one session's trace.
pub struct Trace {
    path: PathBuf,
    session_id: String,
    buffer: Vec<u8>,
}

impl Trace {
    pub fn new(bookkeeping: &Path, session_id: &str) -> Self {
        Self {
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
        // Never through a link a tool may have planted in the bookkeeping dir.
        let file = tokio::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&self.path)
            .await;
        let written = match file {
            Ok(mut file) => file.write_all(&self.buffer).await,
            Err(e) => Err(e),
        };
        if let Err(error) = written {
            tracing::warn!(path = %self.path.display(), %error, "cannot write trace");
        }
        self.buffer.clear();
    }
}
