//! `murmur:a2a@0.2.0` on the host: its `io` (status messages, artifacts and
//! input requests said with parts) and the one conversion between its part
//! records and the 1.0 Part objects roostd keeps with a task.

use base64::Engine as _;
use serde_json::{Value, json};

use super::super::bindings::murmur::a2a0_2_0::{io, types};
use super::super::{ArtifactUpdate, Prompt};
use super::GuestState;

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// A guest's part as a 1.0 Part object. A `data` part that is not JSON is
/// sent as text; metadata that is not a JSON object is dropped.
pub(crate) fn to_json(part: types::Part) -> Value {
    let mut p = match part.content {
        types::Content::Text(text) => json!({ "text": text }),
        types::Content::Raw(bytes) => json!({ "raw": B64.encode(bytes) }),
        types::Content::Url(url) => json!({ "url": url }),
        types::Content::Data(text) => match serde_json::from_str::<Value>(&text) {
            Ok(value) => json!({ "data": value }),
            Err(_) => json!({ "text": text }),
        },
    };
    if let Some(media) = part.media_type {
        p["mediaType"] = media.into();
    }
    if let Some(name) = part.filename {
        p["filename"] = name.into();
    }
    if let Some(meta) = object(part.metadata.as_deref()) {
        p["metadata"] = meta;
    }
    p
}

/// Guest parts as 1.0 Part objects.
pub(crate) fn all_to_json(parts: Vec<types::Part>) -> Vec<Value> {
    parts.into_iter().map(to_json).collect()
}

/// A stored 1.0 Part object as a guest's part (`None`: nothing readable).
/// Raw bytes that are not base64 reach the guest as the text they are.
pub(crate) fn from_json(p: &Value) -> Option<types::Part> {
    let text = |k: &str| p[k].as_str().map(str::to_string);
    let content = if let Some(t) = text("text") {
        types::Content::Text(t)
    } else if let Some(data) = p.get("data") {
        types::Content::Data(data.to_string())
    } else if let Some(url) = text("url") {
        types::Content::Url(url)
    } else if let Some(raw) = text("raw") {
        match B64.decode(raw.as_bytes()) {
            Ok(bytes) => types::Content::Raw(bytes),
            Err(_) => types::Content::Text(raw),
        }
    } else {
        return None;
    };
    Some(types::Part {
        content,
        media_type: text("mediaType"),
        filename: text("filename"),
        metadata: p
            .get("metadata")
            .filter(|m| m.is_object())
            .map(Value::to_string),
    })
}

/// A message's metadata, if it is a JSON object.
fn object(text: Option<&str>) -> Option<Value> {
    serde_json::from_str::<Value>(text?)
        .ok()
        .filter(Value::is_object)
}

impl types::Host for GuestState {}

impl io::Host for GuestState {
    async fn emit_artifact(
        &mut self,
        artifact_id: String,
        parts: Vec<types::Part>,
        append: bool,
        last_chunk: bool,
    ) {
        let Some(task) = &self.task else {
            return;
        };
        let count = parts.len();
        for (i, part) in parts.into_iter().enumerate() {
            let part = to_json(part);
            let (text, part) = match part["text"].as_str() {
                Some(text) if part.get("metadata").is_none() => (text.to_string(), None),
                _ => (String::new(), Some(part)),
            };
            task.artifact(ArtifactUpdate {
                artifact_id: artifact_id.clone(),
                text,
                append: append || i > 0,
                last_chunk: last_chunk && i + 1 == count,
                part,
            })
            .await;
        }
    }

    async fn emit_status(&mut self, parts: Vec<types::Part>) {
        if let Some(task) = &self.task {
            task.status(all_to_json(parts)).await;
        }
    }

    async fn request_input(
        &mut self,
        prompt: Vec<types::Part>,
    ) -> wasmtime::Result<types::Message> {
        let reply = self.ask(Prompt::Parts(all_to_json(prompt))).await?;
        let mut parts: Vec<types::Part> = reply.parts.iter().filter_map(from_json).collect();
        if parts.is_empty() {
            parts.push(types::Part {
                content: types::Content::Text(reply.text),
                media_type: None,
                filename: None,
                metadata: None,
            });
        }
        Ok(types::Message {
            message_id: reply.message_id,
            parts,
            metadata: None,
        })
    }
}
