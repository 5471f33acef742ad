//! The stream writer: a task event of any shape (a state change with any
//! message, artifact chunks with any text or stored part, replies, inputs)
//! as both dialects render it into one server-sent event. Beyond "no panic":
//! each event is exactly one `data:` line and its blank line (no text can
//! split it or start a second event), the line's JSON reads back as the
//! value, states print as names that parse to the same state, and text is
//! carried unchanged.

use roostd::a2a::wire::{self, Dialect, parse_state};
use roostd::tasks::{A2aTask, EventKind, TaskEvent, TaskState};
use serde_json::Value;

/// One input.
pub fn run(data: &[u8]) {
    let Ok(v) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let Ok(event) = serde_json::from_value::<TaskEvent>(v["event"].clone()) else {
        return;
    };
    let text = |k: &str| v[k].as_str().unwrap_or("t").to_string();
    let task = A2aTask {
        id: text("id").as_str().into(),
        context_id: text("contextId"),
        session_id: "s".into(),
        route: "r".into(),
        owner: String::new(),
        state: TaskState::Working,
        text: text("text"),
        parts: Vec::new(),
        message_id: text("messageId"),
        status_message: None,
        status_parts: None,
        answer: None,
        created_at: "2026-12-01T00:00:00Z".into(),
        updated_at: "2026-12-01T00:00:00Z".into(),
    };
    for d in [Dialect::V10, Dialect::V03] {
        let Some(out) = wire::event(&task, &event, d) else {
            assert!(matches!(event.kind, EventKind::Input { .. }));
            continue;
        };
        let frame = wire::sse_data(&out);
        let line = frame
            .strip_prefix("data: ")
            .and_then(|f| f.strip_suffix("\n\n"))
            .expect("one data line and a blank line");
        assert!(
            !line.contains(['\n', '\r']),
            "an event split in two: {frame:?}"
        );
        let back: Value = serde_json::from_str(line).expect("the data line is JSON");
        assert_eq!(back, out);
        let body = match d {
            Dialect::V10 => out
                .as_object()
                .and_then(|o| o.values().next())
                .cloned()
                .unwrap_or(Value::Null),
            Dialect::V03 => out.clone(),
        };
        match &event.kind {
            EventKind::Status { state, .. } => {
                let name = body["status"]["state"].as_str().expect("a state name");
                assert_eq!(parse_state(name), Some(*state));
                assert_eq!(body["taskId"].as_str(), Some(task.id.as_str()));
                if d == Dialect::V03 {
                    assert_eq!(body["final"].as_bool(), Some(state.is_terminal()));
                }
            }
            EventKind::Artifact {
                artifact_id,
                text,
                part: None,
                ..
            } => {
                assert_eq!(
                    body["artifact"]["artifactId"].as_str(),
                    Some(artifact_id.as_str())
                );
                assert_eq!(
                    body["artifact"]["parts"][0]["text"].as_str(),
                    Some(text.as_str())
                );
            }
            EventKind::Reply { text, parts: None } => {
                assert_eq!(body["parts"][0]["text"].as_str(), Some(text.as_str()));
            }
            _ => {}
        }
    }
}
