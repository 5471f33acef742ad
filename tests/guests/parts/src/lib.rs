//! Test capsule (`murmur:a2a/agent@0.2.0`): an A2A handler that reads every
//! part of a message and answers with parts. The first text part says what
//! to do; every other part is echoed back as it came (bytes, URL, data, with
//! media type, filename and metadata):
//! - `both` (or no text part): a final status message (`got N parts`, then
//!   the echoed parts) and an `echo` artifact of the echoed parts;
//! - `message`: only the status message; `artifact`: only the artifact;
//! - `reply`: a message reply of the echoed parts;
//! - `hold`: a working status message (`held`, then the echoed parts), then
//!   waits until the task is canceled;
//! - `fail`: fails with `failed on purpose`;
//! - `ask`: asks for input (`send the rest`, then the echoed parts) and
//!   completes with an `echo` artifact of every part of the answer.

wit_bindgen::generate!({
    path: "../../../wit",
    world: "murmur:a2a/agent@0.2.0",
    generate_all,
});

use exports::murmur::a2a0_2_0::handler::{Answer, Guest, Outcome, Task};
use murmur::a2a0_2_0::io;
use murmur::a2a0_2_0::types::{Artifact, Content, Part};

struct Parts;

fn text(t: &str) -> Part {
    Part {
        content: Content::Text(t.to_string()),
        media_type: None,
        filename: None,
        metadata: None,
    }
}

impl Guest for Parts {
    fn handle(task: Task) -> Outcome {
        let mut command = None;
        let mut echoed = Vec::new();
        for part in task.message.parts {
            match (&part.content, &command) {
                (Content::Text(t), None) => command = Some(t.trim().to_string()),
                _ => echoed.push(part),
            }
        }
        let said = format!("got {} parts", echoed.len() + usize::from(command.is_some()));
        let with = |first: &str, echoed: &[Part]| {
            let mut parts = vec![text(first)];
            parts.extend(echoed.iter().cloned());
            parts
        };
        let artifact = |echoed: Vec<Part>| Artifact {
            artifact_id: "echo".into(),
            parts: echoed,
        };
        match command.as_deref().unwrap_or("both") {
            "message" => Outcome::Completed(Answer {
                message: with(&said, &echoed),
                artifacts: vec![],
            }),
            "artifact" => Outcome::Completed(Answer {
                message: vec![],
                artifacts: vec![artifact(echoed)],
            }),
            "reply" => Outcome::Reply(with(&said, &echoed)),
            "hold" => {
                io::emit_status(&with("held", &echoed));
                loop {
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
            }
            "fail" => Outcome::Failed(vec![text("failed on purpose")]),
            "ask" => {
                let answer = io::request_input(&with("send the rest", &echoed));
                Outcome::Completed(Answer {
                    message: vec![text(&format!("got {} parts back", answer.parts.len()))],
                    artifacts: vec![artifact(answer.parts)],
                })
            }
            _ => Outcome::Completed(Answer {
                message: with(&said, &echoed),
                artifacts: vec![artifact(echoed)],
            }),
        }
    }
}

export!(Parts);
