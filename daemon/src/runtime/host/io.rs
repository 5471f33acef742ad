//! `murmur:a2a/io` and `murmur:task/task`: a handled task's artifacts and
//! its requests for the client's input (the wait is not the guest's time).

use std::time::Instant;

use base64::Engine as _;

use super::super::bindings::murmur;
use super::super::{ArtifactUpdate, Prompt, Reply};
use super::GuestState;

impl murmur::a2a0_1_0::io::Host for GuestState {
    async fn emit_artifact(
        &mut self,
        artifact_id: String,
        part: murmur::a2a0_1_0::io::Part,
        append: bool,
        last_chunk: bool,
    ) {
        use murmur::a2a0_1_0::io::Part;
        let Some(task) = &self.task else {
            return;
        };
        let file = |kind: &str, value: String, name: Option<String>, media: Option<String>| {
            let mut p = serde_json::json!({ kind: value });
            if let Some(name) = name {
                p["filename"] = name.into();
            }
            if let Some(media) = media {
                p["mediaType"] = media.into();
            }
            p
        };
        let (text, part) = match part {
            Part::Text(text) => (text, None),
            Part::Data(json) => match serde_json::from_str::<serde_json::Value>(&json) {
                Ok(value) => (String::new(), Some(serde_json::json!({ "data": value }))),
                Err(_) => (json, None),
            },
            Part::Raw(f) => {
                let bytes = base64::engine::general_purpose::STANDARD.encode(&f.bytes);
                (
                    String::new(),
                    Some(file("raw", bytes, f.filename, f.media_type)),
                )
            }
            Part::Url(f) => (
                String::new(),
                Some(file("url", f.url, f.filename, f.media_type)),
            ),
        };
        task.artifact(ArtifactUpdate {
            artifact_id,
            text,
            append,
            last_chunk,
            part,
        })
        .await;
    }

    async fn request_input(
        &mut self,
        prompt: String,
    ) -> wasmtime::Result<murmur::a2a0_1_0::io::Reply> {
        let reply = self.ask(Prompt::Text(prompt)).await?;
        Ok(murmur::a2a0_1_0::io::Reply {
            message_id: reply.message_id,
            text: reply.text,
        })
    }
}

impl murmur::task::task::Host for GuestState {
    async fn request_input(&mut self, prompt: String) -> wasmtime::Result<String> {
        Ok(self.ask(Prompt::Text(prompt)).await?.text)
    }
}

impl GuestState {
    /// Asks the current task's client for input; the wait is not the guest's time.
    pub(super) async fn ask(&mut self, prompt: Prompt) -> wasmtime::Result<Reply> {
        let Some(link) = self.task.clone() else {
            return Err(wasmtime::format_err!(
                "request-input: this call is not handling an A2A task, so there is no peer to ask"
            ));
        };
        tracing::info!(task_id = %link.task_id(), "guest asks its A2A client for input");
        let started = Instant::now();
        self.waited.begin();
        let answer = link.request_input(prompt).await;
        let waited = started.elapsed();
        self.guard.extend(waited);
        self.waited.end(waited);
        answer.map_err(|e| wasmtime::format_err!("{e}"))
    }
}
