//! The A2A conformance capsule: a script capsule that serves A2A tasks
//! itself (no model). What it does depends on the message id's prefix (the
//! A2A TCK's convention) or on the text (for people and the SDK tests); see
//! README.md.

wit_bindgen::generate!({
    path: "../../wit",
    world: "murmur:a2a/agent@0.1.0",
    generate_all,
});

use exports::murmur::a2a0_1_0::handler::{Guest, Outcome, Task};
use murmur::a2a0_1_0::io::{self, FileBytes, FileUrl, Part};
use murmur::message::send;
use murmur::text::chunks::emit_chunk;

struct Conformance;

fn pause(ms: u64) {
    std::thread::sleep(std::time::Duration::from_millis(ms));
}

fn text(t: &str) -> Part {
    Part::Text(t.to_string())
}

/// One artifact, whole, then the answer.
fn artifact(part: Part) -> Outcome {
    io::emit_artifact("result", &part, false, true);
    Outcome::Completed(String::new())
}

/// Asks for input until an answer does not ask for more: a TCK follow-up
/// keyed `tck-input-required` (or the text "more") keeps the task waiting.
fn converse(prompt: &str) -> Outcome {
    loop {
        let reply = io::request_input(prompt);
        if reply.message_id.starts_with("tck-input-required") || reply.text.trim() == "more" {
            continue;
        }
        return Outcome::Completed(format!("echo: {}", reply.text.trim()));
    }
}

impl Guest for Conformance {
    fn handle(task: Task) -> Outcome {
        let said = task.text.trim();
        let id = task.message_id.as_str();
        // Longer prefixes first.
        if id.starts_with("tck-artifact-file-url") {
            return artifact(Part::Url(FileUrl {
                url: "https://example.com/output.txt".into(),
                filename: Some("output.txt".into()),
                media_type: Some("text/plain".into()),
            }));
        }
        if id.starts_with("tck-artifact-file") {
            return artifact(Part::Raw(FileBytes {
                bytes: b"tck".to_vec(),
                filename: Some("output.txt".into()),
                media_type: Some("text/plain".into()),
            }));
        }
        if id.starts_with("tck-artifact-data") {
            return artifact(Part::Data(r#"{"key":"value","count":42}"#.into()));
        }
        if id.starts_with("tck-artifact-text") {
            return artifact(text("Generated text content"));
        }
        if id.starts_with("tck-stream-artifact-chunked") {
            io::emit_artifact("result", &text("chunk-1 "), true, false);
            io::emit_artifact("result", &text("chunk-2"), true, true);
            return Outcome::Completed(String::new());
        }
        if id.starts_with("tck-message-response") {
            return Outcome::Reply("Direct message response".into());
        }
        if id.starts_with("tck-complete-task") {
            return Outcome::Completed("Hello from TCK".into());
        }
        if id.starts_with("tck-reject-task") || said == "reject" {
            return Outcome::Rejected("rejected".into());
        }
        if let Some(rest) = said.strip_prefix("record") {
            // Each run of this task, as it starts, is a line of
            // `executions.log` in the workdir (the chaos test counts them).
            use std::io::Write;
            let logged = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open("executions.log")
                // One write per line: runs side by side do not interleave.
                .and_then(|mut f| f.write_all(format!("{}\n", task.task_id).as_bytes()));
            if let Err(e) = logged {
                return Outcome::Failed(format!("cannot record the run: {e}"));
            }
            pause(rest.trim().parse().unwrap_or(20));
            return Outcome::Completed(format!("recorded {}", task.task_id));
        }
        if said == "version" {
            // Which version of the capsule answers (upgrades in place).
            let version = std::env::var("MURMUR_CAPSULE_VERSION").unwrap_or_default();
            return Outcome::Completed(format!("version {version}"));
        }
        if said == "fail" {
            return Outcome::Failed("failed as asked".into());
        }
        if id.starts_with("tck-input-required") || said == "ask" {
            return converse("what next?");
        }
        if id.starts_with("test-resubscribe-message-id") {
            pause(4000);
            return Outcome::Completed("resubscribed".into());
        }
        if said == "sleep" {
            // Until canceled (or a minute has passed).
            for _ in 0..600 {
                pause(100);
            }
            return Outcome::Completed("echo: sleep".into());
        }
        if said == "slow" {
            for i in 1..=5 {
                emit_chunk(&format!("tick {i}\n"));
                pause(200);
            }
            return Outcome::Completed("echo: slow".into());
        }
        if let Some(out) = [
            ("tck-stream-ordering-001", "Ordered output"),
            ("tck-stream-001", "Stream hello from TCK"),
            ("tck-stream-003", "Stream task lifecycle"),
            ("tck-stream-artifact-text", "Streamed text content"),
        ]
        .iter()
        .find(|(prefix, _)| id.starts_with(prefix))
        {
            emit_chunk(out.1);
            return Outcome::Completed(out.1.into());
        }
        if let Some(rest) = said.strip_prefix("forward ") {
            // `forward <peer base URL> <text>`: sends <text> on to the peer.
            let (url, message) = rest.split_once(' ').unwrap_or((rest, "hello"));
            let sent = send::send(
                url,
                &send::Message {
                    message_id: format!("{}-fwd", task.message_id),
                    context_id: None,
                    text: message.to_string(),
                },
            );
            return match sent {
                Ok(t) => Outcome::Completed(format!("sent {} {}", t.task_id, t.state)),
                Err(e) => Outcome::Failed(e),
            };
        }
        let answer = format!("echo: {said}");
        emit_chunk(&answer);
        Outcome::Completed(answer)
    }
}

export!(Conformance);
