//! Test capsule (`murmur:peer/agent@0.2.0`): an A2A handler that calls a
//! peer with `murmur:peer/call@0.2.0` and answers with what the peer said.
//! The first text part of the task's message is the call, one `key=value`
//! a line: `url` (card or base URL; with `endpoint=true` the interface),
//! `binding` (`jsonrpc`, `http-json`, `grpc`), `version` (`1.0`, `0.3`),
//! `streaming` (`true`), `text` (the first part sent), `push` (a URL), and
//! `op`:
//! - `send` (default): sends `text` and every other part of the message;
//! - `resubscribe`: sends, returns after the first event, subscribes again
//!   and follows the task to its end;
//! - `cancel`: sends, returns after the first event, cancels the task;
//! - `get`: sends, returns after the first event, waits a second, reads it.
//!
//! With `task=<id>`, `get`, `cancel` and `resubscribe` act on that task of
//! the peer's at once, sending nothing.
//!
//! It completes with a status message of `<state> <peer task id>` and the
//! peer's status message parts, and the peer's artifacts; a call's error
//! fails the task with it.

wit_bindgen::generate!({
    path: "../../../wit",
    world: "murmur:peer/agent@0.2.0",
    generate_all,
});

use exports::murmur::a2a0_2_0::handler::{Answer, Guest, Outcome, Task};
use murmur::a2a0_2_0::types::{Content, Part};
use murmur::peer0_2_0::call::{self, Binding, Peer, Request, Until};

struct Relay;

fn text(t: &str) -> Part {
    Part {
        content: Content::Text(t.to_string()),
        media_type: None,
        filename: None,
        metadata: None,
    }
}

fn run(task: Task) -> Result<call::Answer, String> {
    let mut lines = None;
    let mut rest = Vec::new();
    for part in task.message.parts {
        match (&part.content, &lines) {
            (Content::Text(t), None) => lines = Some(t.clone()),
            _ => rest.push(part),
        }
    }
    let lines = lines.unwrap_or_default();
    let get = |key: &str| {
        lines.lines().find_map(|l| {
            let (k, v) = l.split_once('=')?;
            (k.trim() == key).then(|| v.trim().to_string())
        })
    };
    let peer = Peer {
        url: get("url").ok_or("say url=<the peer's card or URL>")?,
        binding: match get("binding").as_deref() {
            None => None,
            Some("jsonrpc") => Some(Binding::Jsonrpc),
            Some("http-json") => Some(Binding::HttpJson),
            Some("grpc") => Some(Binding::Grpc),
            Some(other) => return Err(format!("binding={other}?")),
        },
        version: get("version"),
        endpoint: get("endpoint").as_deref() == Some("true"),
        tenant: get("tenant"),
    };
    let op = get("op").unwrap_or_else(|| "send".into());
    // `task=<id>`: act on a task this relay did not just send.
    if let Some(id) = get("task") {
        return match op.as_str() {
            "get" => call::get(&peer, &id),
            "cancel" => call::cancel(&peer, &id),
            "resubscribe" => call::subscribe(&peer, &id, Until::Done, 60),
            other => Err(format!("op={other} with task=?")),
        };
    }
    let mut parts = vec![text(&get("text").unwrap_or_else(|| "hello".into()))];
    parts.extend(rest);
    let request = Request {
        parts,
        message_id: None,
        context_id: None,
        task_id: None,
        metadata: None,
        streaming: get("streaming").as_deref() == Some("true"),
        push: get("push").map(|url| call::Push {
            url,
            token: Some("relay-token".into()),
            id: None,
        }),
        until: if op == "send" {
            Until::Done
        } else {
            Until::Accepted
        },
        timeout_secs: 60,
    };
    let sent = call::send(&peer, &request)?;
    match op.as_str() {
        "send" => Ok(sent),
        "resubscribe" => call::subscribe(&peer, &sent.task_id, Until::Done, 60),
        "cancel" => call::cancel(&peer, &sent.task_id),
        "get" => {
            std::thread::sleep(std::time::Duration::from_secs(1));
            call::get(&peer, &sent.task_id)
        }
        other => Err(format!("op={other}?")),
    }
}

impl Guest for Relay {
    fn handle(task: Task) -> Outcome {
        match run(task) {
            Ok(a) => {
                let mut message = vec![text(&format!("{} {}", a.state, a.task_id))];
                message.extend(a.message);
                Outcome::Completed(Answer {
                    message,
                    artifacts: a.artifacts,
                })
            }
            Err(e) => Outcome::Failed(vec![text(&e)]),
        }
    }
}

export!(Relay);
