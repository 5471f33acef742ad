//! What a gRPC peer sends: any bytes as the binding's request messages
//! (prost decoding), and the ProtoJSON they become for the operations the
//! other bindings share. Beyond "no panic": a message that decodes encodes
//! back to bytes that decode to the same message, and its ProtoJSON read
//! back writes the same ProtoJSON.

use prost::Message;
use roostd::a2a::grpc::pb;

fn round_trips<M>(data: &[u8])
where
    M: Message
        + Default
        + PartialEq
        + std::fmt::Debug
        + serde::Serialize
        + serde::de::DeserializeOwned,
{
    let Ok(message) = M::decode(data) else {
        return;
    };
    let again = M::decode(message.encode_to_vec().as_slice()).expect("re-encoded bytes decode");
    assert_eq!(again, message);
    // Not every message has a JSON form (a NaN in a Struct has none).
    let Ok(json) = serde_json::to_value(&message) else {
        return;
    };
    // Reading its ProtoJSON back is stable after one trip: what is read
    // writes JSON that reads back to the same message. (Not after none: a
    // `Value` with no kind, which no JSON carries, is written as `null` and
    // read back as an absent field; the fuzzer found that first.)
    let Ok(once) = serde_json::from_value::<M>(json) else {
        return;
    };
    let written = serde_json::to_value(&once).expect("what was read writes");
    let twice = serde_json::from_value::<M>(written.clone()).expect("what was written reads");
    assert_eq!(twice, once, "{written}");
}

/// One input.
pub fn run(data: &[u8]) {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    match which % 6 {
        0 => round_trips::<pb::SendMessageRequest>(rest),
        1 => round_trips::<pb::GetTaskRequest>(rest),
        2 => round_trips::<pb::ListTasksRequest>(rest),
        3 => round_trips::<pb::TaskPushNotificationConfig>(rest),
        4 => round_trips::<pb::CancelTaskRequest>(rest),
        _ => round_trips::<pb::StreamResponse>(rest),
    }
}
