//! `murmur:text/chunks`: streamed text, to the session's log and, while a
//! task is handled, to its answer (thinking as working status messages).

use super::super::bindings::murmur;
use super::GuestState;
use crate::logs::Stream;

impl murmur::text::chunks::Host for GuestState {
    async fn emit_chunk(&mut self, chunk: String) {
        self.log.write(Stream::Stdout, chunk.as_bytes());
        if let Some(task) = &self.task {
            task.chunk(&chunk, false).await;
        }
    }

    async fn emit_thinking_chunk(&mut self, chunk: String) {
        self.log.write(Stream::Stdout, chunk.as_bytes());
        if let Some(task) = &self.task {
            task.chunk(&chunk, true).await;
        }
    }
}
