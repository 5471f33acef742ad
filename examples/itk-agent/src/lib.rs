//! The A2A ITK agent capsule (`murmur:peer/agent@0.2.0`): it takes a task
//! whose message carries an ITK `Instruction` (protobuf, as a raw part of
//! type `application/x-protobuf` or named `instruction.bin`, or base64 in a
//! text part) and follows it:
//!
//! - `return_response {response, hold_task}`: answers `response`; with
//!   `hold_task` the task stays `working` with the status message
//!   `<response>\ntask-finished` (re-sent every 2 s) and completes after
//!   10 s, so a client can disconnect and subscribe again meanwhile;
//! - `call_agent {transport, agent_card_uri, instruction, streaming,
//!   send_message | push_notification {url} | resubscribe}`: calls the
//!   agent the card names over that transport (`murmur:peer/call@0.2.0`;
//!   gRPC always streaming), sending the nested instruction as it came; a
//!   push config asks the agent to post to `<url>/notifications` with the
//!   token `itk-token`; `resubscribe` returns after the first event,
//!   subscribes again, reads until a status message says `task-finished`,
//!   and cancels the task if it has not ended;
//! - `steps {instructions}`: each in turn, their responses together.
//!
//! The answer is a completed task whose status message is the responses,
//! one a line. The wire format is read here from the field numbers of the
//! ITK's `protos/instruction.proto`.

wit_bindgen::generate!({
    path: "../../wit",
    world: "murmur:peer/agent@0.2.0",
    generate_all,
});

use exports::murmur::a2a0_2_0::handler::{Answer, Guest, Outcome, Task};
use murmur::a2a0_2_0::io;
use murmur::a2a0_2_0::types::{Content, Part};
use murmur::peer0_2_0::call::{self, Binding, Peer, Push, Request, Until};

mod wire;
use wire::{Behavior, Call, Instruction};

struct Itk;

fn text(t: &str) -> Part {
    Part {
        content: Content::Text(t.to_string()),
        media_type: None,
        filename: None,
        metadata: None,
    }
}

/// The instruction a message carries.
fn instruction(parts: &[Part]) -> Result<Instruction, String> {
    let mut error = "no ITK instruction in the message".to_string();
    for p in parts {
        let bytes = match &p.content {
            Content::Raw(b) => b.clone(),
            Content::Text(t) => match wire::base64(t.trim()) {
                Some(b) => b,
                None => continue,
            },
            _ => continue,
        };
        match Instruction::parse(&bytes) {
            Ok(i) => return Ok(i),
            Err(e) => error = format!("the instruction does not decode: {e}"),
        }
    }
    Err(error)
}

fn binding(transport: &str) -> Result<Binding, String> {
    match transport.to_ascii_uppercase().as_str() {
        "JSONRPC" | "" => Ok(Binding::Jsonrpc),
        "HTTP+JSON" | "HTTP_JSON" | "REST" => Ok(Binding::HttpJson),
        "GRPC" => Ok(Binding::Grpc),
        other => Err(format!(
            "transport '{other}' is not one of JSONRPC, HTTP+JSON, GRPC"
        )),
    }
}

fn said(parts: &[Part]) -> Vec<String> {
    parts
        .iter()
        .filter_map(|p| match &p.content {
            Content::Text(t) if !t.is_empty() => Some(t.clone()),
            _ => None,
        })
        .collect()
}

/// Calls the agent a `call_agent` names; what it answered.
fn call_agent(c: &Call) -> Result<Vec<String>, String> {
    let binding = binding(&c.transport)?;
    let peer = Peer {
        url: c.agent_card_uri.clone(),
        binding: Some(binding),
        version: None,
        endpoint: false,
        tenant: None,
    };
    let resubscribe = matches!(c.behavior, Behavior::Resubscribe);
    let push = match &c.behavior {
        Behavior::Push(url) => {
            let url = if url.starts_with("http://") || url.starts_with("https://") {
                url.clone()
            } else {
                format!("http://{url}")
            };
            Some(Push {
                url: format!("{}/notifications", url.trim_end_matches('/')),
                token: Some("itk-token".into()),
                id: None,
            })
        }
        _ => None,
    };
    let request = Request {
        parts: vec![Part {
            content: Content::Raw(c.instruction.clone()),
            media_type: Some("application/x-protobuf".into()),
            filename: Some("instruction.bin".into()),
            metadata: None,
        }],
        message_id: None,
        context_id: None,
        task_id: None,
        metadata: None,
        streaming: c.streaming || binding == Binding::Grpc || resubscribe,
        push,
        until: if resubscribe {
            Until::Accepted
        } else {
            Until::Done
        },
        timeout_secs: 110,
    };
    let sent = call::send(&peer, &request)
        .map_err(|e| format!("calling {} over {}: {e}", c.agent_card_uri, c.transport))?;
    if !resubscribe {
        return Ok(said(&sent.message));
    }
    // Disconnected after the first event: subscribe again until a status
    // message says the work is done, then cancel what still runs. A task
    // that has ended meanwhile cannot be subscribed to: it is read.
    for _ in 0..100 {
        let now = match call::subscribe(&peer, &sent.task_id, Until::Accepted, 30) {
            Ok(now) => now,
            Err(_) => call::get(&peer, &sent.task_id)?,
        };
        let texts = said(&now.message);
        let ended = matches!(
            now.state.as_str(),
            "completed" | "failed" | "canceled" | "rejected"
        );
        if ended || texts.iter().any(|t| t.contains("task-finished")) {
            if !ended {
                call::cancel(&peer, &sent.task_id)?;
            }
            return Ok(texts
                .iter()
                .map(|t| t.replace("task-finished", ""))
                .collect());
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    Err(format!("task {} never said task-finished", sent.task_id))
}

fn run(i: &Instruction) -> Result<Vec<String>, String> {
    match i {
        Instruction::Return { response, .. } => Ok(vec![response.clone()]),
        Instruction::Call(c) => call_agent(c),
        Instruction::Steps(steps) => {
            let mut all = Vec::new();
            for s in steps {
                all.extend(run(s)?);
            }
            Ok(all)
        }
    }
}

impl Guest for Itk {
    fn handle(task: Task) -> Outcome {
        let i = match instruction(&task.message.parts) {
            Ok(i) => i,
            Err(e) => return Outcome::Failed(vec![text(&e)]),
        };
        let response = match run(&i) {
            Ok(lines) => lines.join("\n"),
            Err(e) => return Outcome::Failed(vec![text(&e)]),
        };
        if i.holds() {
            // Held: working, saying it is done, for a client that
            // subscribes again; then completed.
            let finished = format!("{response}\ntask-finished");
            for _ in 0..5 {
                io::emit_status(&[text(&finished)]);
                std::thread::sleep(std::time::Duration::from_secs(2));
            }
            return Outcome::Completed(Answer {
                message: vec![text(&finished)],
                artifacts: vec![],
            });
        }
        Outcome::Completed(Answer {
            message: vec![text(&response)],
            artifacts: vec![],
        })
    }
}

export!(Itk);
