//! Test capsule (`murmur:peer/agent@0.1.0`): an A2A handler that sends to
//! peers and calls them. A task
//! - `call <peer> <seconds> <text>` sends `<text>` to `<peer>` with
//!   `murmur:peer/call` and completes with `<state>: <the peer's text>`;
//! - `callas <peer> <seconds> <message-id> <context-id|-> <text>` does the
//!   same with the ids given;
//! - `send <peer> <message-id> <context-id|-> <text>` sends with
//!   `murmur:message/send` and completes with `sent <task-id> <context-id>
//!   <state>`.
//!
//! An error fails the task with it.

wit_bindgen::generate!({
    path: "../../../wit",
    world: "murmur:peer/agent@0.1.0",
    generate_all,
});

use exports::murmur::a2a0_1_0::handler::{Guest, Outcome, Task};
use murmur::message::send::{Message, send};
use murmur::peer0_1_0::call::call;

struct Caller;

const USAGE: &str = "say: call <peer> <seconds> <text>, \
    callas <peer> <seconds> <message-id> <context-id|-> <text>, \
    or send <peer> <message-id> <context-id|-> <text>";

fn message(id: &str, context: &str, text: &str) -> Message {
    Message {
        message_id: id.to_string(),
        context_id: (context != "-").then(|| context.to_string()),
        text: text.to_string(),
    }
}

fn called(peer: &str, secs: &str, message: &Message) -> Outcome {
    match call(peer, message, secs.parse().unwrap_or(0)) {
        Ok(answer) => Outcome::Completed(format!("{}: {}", answer.state, answer.text)),
        Err(e) => Outcome::Failed(e),
    }
}

impl Guest for Caller {
    fn handle(task: Task) -> Outcome {
        let words: Vec<&str> = task.text.trim().splitn(6, ' ').collect();
        match words.as_slice() {
            ["call", peer, secs, rest @ ..] if !rest.is_empty() => {
                let text = task.text.trim().splitn(4, ' ').nth(3).unwrap_or_default();
                called(peer, secs, &message(&format!("{}-call", task.message_id), "-", text))
            }
            ["callas", peer, secs, id, context, text] => {
                called(peer, secs, &message(id, context, text))
            }
            ["send", peer, id, context, rest @ ..] if !rest.is_empty() => {
                let text = task.text.trim().splitn(5, ' ').nth(4).unwrap_or_default();
                match send(peer, &message(id, context, text)) {
                    Ok(t) => {
                        Outcome::Completed(format!("sent {} {} {}", t.task_id, t.context_id, t.state))
                    }
                    Err(e) => Outcome::Failed(e),
                }
            }
            _ => Outcome::Rejected(USAGE.into()),
        }
    }
}

export!(Caller);
