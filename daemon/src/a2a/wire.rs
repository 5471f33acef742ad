//! The A2A wire formats: requests parsed into roostd's terms, tasks and
//! events rendered for protocol 1.0 (ProtoJSON: camelCase, `TASK_STATE_*`,
//! no `kind`) or 0.3 (lowercase states, `kind` discriminators).

use serde_json::{Value, json};

use crate::tasks::{A2aTask, ANSWER_ARTIFACT, EventKind, TaskEvent, TaskState};

/// Which protocol version a request speaks (`A2A-Version`; absent means 0.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    V03,
    V10,
}

/// An `A2A-Version` this server does not speak.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("A2A-Version {0} is not supported: this server speaks 1.0 (and 0.3 without the header)")]
pub struct UnsupportedVersion(pub String);

/// What is wrong with a request's message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MessageError {
    #[error("params.message is required and must be an object")]
    NotAnObject,
    #[error("message.messageId is required")]
    NoMessageId,
    #[error("message.parts must be a non-empty list")]
    NoParts,
    #[error("message has no part this agent can read: send text, data, or a file (url or raw)")]
    Unreadable,
}

impl Dialect {
    /// From the `A2A-Version` header: empty or absent is 0.3, any 1.x is 1.0.
    pub fn from_header(value: Option<&str>) -> Result<Self, UnsupportedVersion> {
        match value.map(str::trim) {
            None | Some("") => Ok(Self::V03),
            Some(v) if v.split('.').next() == Some("1") => Ok(Self::V10),
            Some(v) if v.starts_with("0.3") => Ok(Self::V03),
            Some(v) => Err(UnsupportedVersion(v.to_string())),
        }
    }
}

/// An incoming message reduced to what roostd uses, plus its canonical JSON.
#[derive(Debug, Clone, PartialEq)]
pub struct InMessage {
    pub message_id: String,
    pub context_id: Option<String>,
    pub task_id: Option<String>,
    pub text: String,
    /// `{messageId, contextId?, role, parts:[{text}]}` as stored with the task.
    pub canonical: Value,
}

/// Reads `params.message` of either dialect; the error says what is wrong.
pub fn parse_message(message: &Value) -> Result<InMessage, MessageError> {
    let obj = message.as_object().ok_or(MessageError::NotAnObject)?;
    let get = |camel: &str, snake: &str| {
        obj.get(camel)
            .or_else(|| obj.get(snake))
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    };
    let message_id = get("messageId", "message_id").ok_or(MessageError::NoMessageId)?;
    let parts = obj
        .get("parts")
        .and_then(Value::as_array)
        .filter(|p| !p.is_empty())
        .ok_or(MessageError::NoParts)?;
    // Every part kept as a 1.0 Part object; the text is what a
    // text-reading capsule gets (a file named, so that it knows it was sent
    // one).
    let parts: Vec<Value> = parts.iter().filter_map(normal_part).collect();
    if parts.is_empty() {
        return Err(MessageError::Unreadable);
    }
    let text = crate::tasks::parts_text(&parts);
    let context_id = get("contextId", "context_id");
    let mut canonical = json!({
        "messageId": message_id,
        "contextId": context_id,
        "role": "ROLE_USER",
        "parts": parts,
    });
    if let Some(meta) = obj.get("metadata").filter(|m| m.is_object()) {
        canonical["metadata"] = meta.clone();
    }
    Ok(InMessage {
        message_id,
        context_id,
        task_id: get("taskId", "task_id"),
        text,
        canonical,
    })
}

/// A stored 1.0 Part object as 0.3 JSON-RPC writes it (`kind`, `file`).
pub fn part_v03(p: &Value) -> Value {
    part("", Some(p), Dialect::V03)
}

/// A part of either dialect as a 1.0 Part object (`None`: nothing this
/// agent can read): text, data, or a file's bytes or URL, with its media
/// type, filename and metadata.
pub fn normal_part(part: &Value) -> Option<Value> {
    let file = part.get("file").unwrap_or(part);
    fn first<'a>(from: &'a Value, keys: &[&str]) -> Option<&'a str> {
        keys.iter().find_map(|k| from.get(*k)?.as_str())
    }
    let mut p = if let Some(text) = part.get("text").and_then(Value::as_str) {
        json!({ "text": text })
    } else if let Some(data) = part.get("data") {
        json!({ "data": data })
    } else if let Some(url) = first(file, &["url", "uri"]) {
        json!({ "url": url })
    } else if let Some(raw) = first(file, &["raw", "bytes"]) {
        json!({ "raw": raw })
    } else {
        return None;
    };
    if let Some(name) = first(file, &["filename", "name"]) {
        p["filename"] = json!(name);
    }
    if let Some(media) =
        first(file, &["mediaType", "mimeType"]).or_else(|| first(part, &["mediaType"]))
    {
        p["mediaType"] = json!(media);
    }
    if let Some(meta) = part.get("metadata").filter(|m| m.is_object()) {
        p["metadata"] = meta.clone();
    }
    Some(p)
}

pub fn state_name(state: TaskState, d: Dialect) -> &'static str {
    match d {
        Dialect::V03 => state.as_str(),
        Dialect::V10 => match state {
            TaskState::Submitted => "TASK_STATE_SUBMITTED",
            TaskState::Working => "TASK_STATE_WORKING",
            TaskState::InputRequired => "TASK_STATE_INPUT_REQUIRED",
            TaskState::Completed => "TASK_STATE_COMPLETED",
            TaskState::Failed => "TASK_STATE_FAILED",
            TaskState::Canceled => "TASK_STATE_CANCELED",
            TaskState::Rejected => "TASK_STATE_REJECTED",
        },
    }
}

/// A state from a filter: either spelling.
pub fn parse_state(s: &str) -> Option<TaskState> {
    TaskState::parse(s).or_else(|| {
        let rest = s.strip_prefix("TASK_STATE_")?;
        TaskState::parse(&rest.to_ascii_lowercase().replace('_', "-"))
    })
}

fn text_part(text: &str, d: Dialect) -> Value {
    match d {
        Dialect::V10 => json!({"text": text}),
        Dialect::V03 => json!({"kind": "text", "text": text}),
    }
}

/// An agent message: its stored parts, else its text.
fn agent_message(task: &A2aTask, id_suffix: &str, (text, parts): Said<'_>, d: Dialect) -> Value {
    let parts: Vec<Value> = match parts {
        Some(parts) => parts.iter().map(|p| part("", Some(p), d)).collect(),
        None => vec![text_part(text, d)],
    };
    let mut m = json!({
        "messageId": format!("{}-{id_suffix}", task.id),
        "contextId": task.context_id,
        "taskId": task.id,
        "role": if d == Dialect::V10 { "ROLE_AGENT" } else { "agent" },
        "parts": parts,
    });
    if d == Dialect::V03 {
        m["kind"] = json!("message");
    }
    m
}

/// A client's message: its stored parts, else its text.
fn user_message(task: &A2aTask, message_id: &str, (text, parts): Said<'_>, d: Dialect) -> Value {
    let parts: Vec<Value> = match parts {
        Some(parts) if !parts.is_empty() => parts.iter().map(|p| part("", Some(p), d)).collect(),
        _ => vec![text_part(text, d)],
    };
    let mut m = json!({
        "messageId": message_id,
        "contextId": task.context_id,
        "taskId": task.id,
        "role": if d == Dialect::V10 { "ROLE_USER" } else { "user" },
        "parts": parts,
    });
    if d == Dialect::V03 {
        m["kind"] = json!("message");
    }
    m
}

/// A part: text, or a stored 1.0 Part (text, data, raw or url file).
fn part(text: &str, stored: Option<&Value>, d: Dialect) -> Value {
    let Some(p) = stored else {
        return text_part(text, d);
    };
    if d == Dialect::V10 {
        return p.clone();
    }
    let mut v = if let Some(text) = p.get("text") {
        json!({"kind": "text", "text": text})
    } else if let Some(data) = p.get("data") {
        json!({"kind": "data", "data": data})
    } else {
        v03_file(p)
    };
    if let Some(meta) = p.get("metadata") {
        v["metadata"] = meta.clone();
    }
    v
}

fn v03_file(p: &Value) -> Value {
    let mut file = json!({});
    for (from, to) in [
        ("raw", "bytes"),
        ("url", "uri"),
        ("filename", "name"),
        ("mediaType", "mimeType"),
    ] {
        if let Some(v) = p.get(from) {
            file[to] = v.clone();
        }
    }
    json!({"kind": "file", "file": file})
}

fn artifact(id: &str, parts: Vec<Value>) -> Value {
    json!({"artifactId": id, "name": id, "parts": parts})
}

/// The task's artifacts as its log built them: per artifact (in the order
/// they first appeared) its parts, an `append` adding one, anything else
/// replacing them.
fn artifacts(log: &[TaskEvent], d: Dialect) -> Vec<Value> {
    let mut built: Vec<(&str, Vec<Value>)> = Vec::new();
    for e in log {
        if let EventKind::Artifact {
            artifact_id,
            text,
            append,
            part: stored,
            ..
        } = &e.kind
        {
            let p = part(text, stored.as_ref(), d);
            match built.iter_mut().find(|(id, _)| id == artifact_id) {
                Some((_, parts)) if *append => parts.push(p),
                Some((_, parts)) => *parts = vec![p],
                None => built.push((artifact_id, vec![p])),
            }
        }
    }
    built
        .into_iter()
        .map(|(id, parts)| artifact(id, parts))
        .collect()
}

/// The message the agent answered with instead of a task result, if it did.
pub fn reply(log: &[TaskEvent]) -> Option<Said<'_>> {
    log.iter().find_map(|e| match &e.kind {
        EventKind::Reply { text, parts } => Some((text.as_str(), parts.as_deref())),
        _ => None,
    })
}

/// What an agent said: its text, and its parts when it gave more than text.
pub type Said<'a> = (&'a str, Option<&'a [Value]>);

/// The agent's message reply as a SendMessage result (or stream event).
pub fn reply_result(t: &A2aTask, said: Said<'_>, d: Dialect) -> Value {
    let m = agent_message(t, "reply", said, d);
    match d {
        Dialect::V10 => json!({"message": m}),
        Dialect::V03 => m,
    }
}

fn status(task_state: TaskState, message: Option<Value>, at: &str, d: Dialect) -> Value {
    let mut s = json!({"state": state_name(task_state, d), "timestamp": at});
    if let Some(m) = message {
        s["message"] = m;
    }
    s
}

/// How much of a task to render.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    /// `None`: all history; `Some(0)`: none.
    pub history: Option<usize>,
    pub artifacts: bool,
}

impl Default for Shape {
    fn default() -> Self {
        Self {
            history: None,
            artifacts: true,
        }
    }
}

/// The task's messages in order: the one that created it, then each input
/// request (agent) and its answer (user) from `log`.
fn history(t: &A2aTask, log: &[TaskEvent], d: Dialect) -> Vec<Value> {
    let mut h = vec![user_message(t, &t.message_id, (&t.text, Some(&t.parts)), d)];
    for e in log {
        match &e.kind {
            EventKind::Status {
                state: TaskState::InputRequired,
                message: Some(m),
                parts,
            } => h.push(agent_message(
                t,
                &e.seq.to_string(),
                (m, parts.as_deref()),
                d,
            )),
            EventKind::Input {
                message_id,
                text,
                parts,
            } => {
                h.push(user_message(t, message_id, (text, parts.as_deref()), d));
            }
            EventKind::Reply { text, parts } => {
                h.push(agent_message(t, "reply", (text, parts.as_deref()), d));
            }
            _ => {}
        }
    }
    h
}

/// A task without its log: the history is the message that created it.
pub fn task(t: &A2aTask, d: Dialect, shape: Shape) -> Value {
    task_with_log(t, &[], d, shape)
}

/// A task; its history also has the input requests and answers in `log`.
pub fn task_with_log(t: &A2aTask, log: &[TaskEvent], d: Dialect, shape: Shape) -> Value {
    // A message reply is the completed task's status message.
    let message = match (t.status_message.as_deref(), reply(log)) {
        (Some(m), _) => Some(agent_message(
            t,
            "status",
            (m, t.status_parts.as_deref()),
            d,
        )),
        (None, Some(said)) => Some(agent_message(t, "reply", said, d)),
        (None, None) => None,
    };
    let mut v = json!({
        "id": t.id,
        "contextId": t.context_id,
        "status": status(t.state, message, &t.updated_at, d),
    });
    if shape.artifacts {
        let mut built = artifacts(log, d);
        if built.is_empty()
            && let Some(answer) = &t.answer
        {
            built.push(artifact(ANSWER_ARTIFACT, vec![text_part(answer, d)]));
        }
        if !built.is_empty() {
            v["artifacts"] = Value::Array(built);
        }
    }
    if shape.history != Some(0) {
        let mut h = history(t, log, d);
        if let Some(n) = shape.history {
            h.drain(..h.len().saturating_sub(n));
        }
        v["history"] = Value::Array(h);
    }
    if d == Dialect::V03 {
        v["kind"] = json!("task");
    }
    v
}

/// One stream event of a task (`None` for nothing to send: a client's own
/// follow-up message is history, not an update).
pub fn event(t: &A2aTask, e: &TaskEvent, d: Dialect) -> Option<Value> {
    Some(match &e.kind {
        EventKind::Input { .. } => return None,
        EventKind::Reply { text, parts } => reply_result(t, (text, parts.as_deref()), d),
        EventKind::Status {
            state,
            message,
            parts,
        } => {
            let message = message
                .as_deref()
                .map(|m| agent_message(t, &e.seq.to_string(), (m, parts.as_deref()), d));
            let mut u = json!({
                "taskId": t.id,
                "contextId": t.context_id,
                "status": status(*state, message, &e.at, d),
            });
            match d {
                Dialect::V10 => json!({"statusUpdate": u}),
                Dialect::V03 => {
                    u["kind"] = json!("status-update");
                    u["final"] = json!(state.is_terminal());
                    u
                }
            }
        }
        EventKind::Artifact {
            artifact_id,
            text,
            append,
            last_chunk,
            part: stored,
        } => {
            let mut u = json!({
                "taskId": t.id,
                "contextId": t.context_id,
                "artifact": artifact(artifact_id, vec![part(text, stored.as_ref(), d)]),
            });
            if *append {
                u["append"] = json!(true);
            }
            if *last_chunk {
                u["lastChunk"] = json!(true);
            }
            match d {
                Dialect::V10 => json!({"artifactUpdate": u}),
                Dialect::V03 => {
                    u["kind"] = json!("artifact-update");
                    u
                }
            }
        }
    })
}

/// One server-sent event carrying a value: a single `data:` line (JSON
/// escapes every line break inside strings), then the blank line.
pub fn sse_data(v: &Value) -> String {
    format!("data: {v}\n\n")
}

/// A task as the first event of a stream or the result of SendMessage.
pub fn task_result(t: &A2aTask, d: Dialect) -> Value {
    match d {
        Dialect::V10 => json!({"task": task(t, d, Shape::default())}),
        Dialect::V03 => task(t, d, Shape::default()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_follow_the_header() {
        assert_eq!(Dialect::from_header(None), Ok(Dialect::V03));
        assert_eq!(Dialect::from_header(Some("")), Ok(Dialect::V03));
        assert_eq!(Dialect::from_header(Some("1.0")), Ok(Dialect::V10));
        assert_eq!(Dialect::from_header(Some("1.2")), Ok(Dialect::V10));
        assert!(Dialect::from_header(Some("99.0")).is_err());
    }

    #[test]
    fn messages_of_both_dialects_parse_and_bad_ones_say_why() {
        let m = parse_message(&json!({"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}], "contextId": "c"}))
            .expect("1.0");
        assert_eq!(
            (m.text.as_str(), m.context_id.as_deref()),
            ("hi", Some("c"))
        );
        let m = parse_message(&json!({"kind": "message", "message_id": "m2", "role": "user", "parts": [{"kind": "text", "text": "yo"}], "taskId": "t"}))
            .expect("0.3");
        assert_eq!((m.text.as_str(), m.task_id.as_deref()), ("yo", Some("t")));
        for (bad, needle) in [
            (json!(null), "must be an object"),
            (json!({"parts": [{"text": "x"}]}), "messageId is required"),
            (json!({"messageId": "m", "parts": []}), "non-empty"),
            (json!({"messageId": "m", "parts": [{"x": "y"}]}), "no part"),
        ] {
            let error = parse_message(&bad).expect_err("bad").to_string();
            assert!(error.contains(needle), "{error}");
        }
        assert_eq!(
            parse_state("TASK_STATE_INPUT_REQUIRED"),
            Some(TaskState::InputRequired)
        );
        assert_eq!(parse_state("working"), Some(TaskState::Working));
    }
}
