//! What a peer elsewhere answers a `murmur:peer/call` with, as roostd's
//! client reads it: an event stream split into reads however the peer (or
//! the network) splits it, in either version and binding's shapes, and the
//! messages of a gRPC stream. Beyond "no panic": the call's outcome does
//! not depend on how the stream was split (the input's split, one read, a
//! byte per read), and what a call keeps stays within `peer_stream`'s
//! limits.

use roostd::a2a::client::{read_grpc, read_stream};
use roostd::runtime::PeerTask;
use roostd::runtime::peer_stream::{MAX_ARTIFACTS, MAX_HELD_BYTES, MAX_ID_BYTES};

/// An outcome, comparable across splits.
fn outcome(read: Result<PeerTask, impl std::fmt::Display>) -> Result<String, String> {
    read.map(|task| {
        assert!(
            task.artifacts.len() <= MAX_ARTIFACTS,
            "{} artifacts",
            task.artifacts.len()
        );
        assert!(task.task_id.len() <= MAX_ID_BYTES && task.context_id.len() <= MAX_ID_BYTES);
        let held: usize = task
            .artifacts
            .iter()
            .map(|(id, parts)| id.len() + parts.iter().map(|p| p.to_string().len()).sum::<usize>())
            .sum();
        // A task that came whole in one event may hold up to it.
        assert!(held <= MAX_HELD_BYTES + (1 << 20), "held {held} bytes");
        format!("{task:?}")
    })
    .map_err(|e| e.to_string())
}

/// One input: its first byte chooses the version, the binding and whether
/// the rest is gRPC messages (each a length byte and that many bytes).
pub fn run(data: &[u8]) {
    let Some((&how, rest)) = data.split_first() else {
        return;
    };
    let v03 = how & 1 == 1;
    if how & 4 == 4 {
        let mut messages = Vec::new();
        let mut at = rest;
        while let Some((&len, tail)) = at.split_first() {
            let len = usize::from(len).min(tail.len());
            messages.push(&tail[..len]);
            at = &tail[len..];
        }
        let _ = outcome(read_grpc(&messages, v03));
        return;
    }
    let rpc = how & 2 == 2;
    // The input's split: at each 0xFF byte (which is dropped).
    let split: Vec<&[u8]> = rest.split(|&b| b == 0xFF).collect();
    let joined = split.concat();
    let whole = outcome(read_stream(&[&joined], v03, rpc));
    assert_eq!(
        outcome(read_stream(&split, v03, rpc)),
        whole,
        "split by the input"
    );
    if joined.len() <= 2048 {
        let bytes: Vec<&[u8]> = joined.chunks(1).collect();
        assert_eq!(
            outcome(read_stream(&bytes, v03, rpc)),
            whole,
            "a byte per read"
        );
    }
}
