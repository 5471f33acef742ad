//! Test capsule (`murmur:peer/agent@0.1.0`): an A2A handler that calls peers
//! and waits for their answers (`murmur:peer/call`). A task `call <peer>
//! <seconds> <text>` sends `<text>` to `<peer>` and completes with
//! `<state>: <the peer's text>`; an error fails the task with it.

wit_bindgen::generate!({
    path: "../../../wit",
    world: "murmur:peer/agent@0.1.0",
    generate_all,
});

use exports::murmur::a2a0_1_0::handler::{Guest, Outcome, Task};
use murmur::message::send::Message;
use murmur::peer0_1_0::call::call;

struct Caller;

impl Guest for Caller {
    fn handle(task: Task) -> Outcome {
        let mut words = task.text.trim().splitn(4, ' ');
        let (Some("call"), Some(peer), Some(secs), Some(text)) =
            (words.next(), words.next(), words.next(), words.next())
        else {
            return Outcome::Rejected("say: call <peer> <seconds> <text>".into());
        };
        let message = Message {
            message_id: format!("{}-call", task.message_id),
            context_id: None,
            text: text.to_string(),
        };
        match call(peer, &message, secs.parse().unwrap_or(0)) {
            Ok(answer) => Outcome::Completed(format!("{}: {}", answer.state, answer.text)),
            Err(e) => Outcome::Failed(e),
        }
    }
}

export!(Caller);
