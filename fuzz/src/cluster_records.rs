//! What a node reads from NATS, which any NATS client the server lets in
//! can write: a handed-over request's and answer's frame (a length, a JSON
//! head, a body), the route table's and node registry's records, the task
//! journal's entries and the artifact index's. Beyond "no panic": a frame
//! that reads is packed and read back to the same head and body, and a
//! record that reads is written and read back to the same record.

use bytes::Bytes;
use roostd::a2a::routing::{Forward, ForwardHead};
use roostd::cluster::journal::Entry;
use roostd::cluster::routes::RouteRecord;
use roostd::cluster::{NodeRecord, pack, unpack};

/// `T` from JSON, and back: the same value (compared as `Debug`, as not
/// every record is `PartialEq`).
fn round_trips<T: serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug>(data: &[u8]) {
    let Ok(value) = serde_json::from_slice::<T>(data) else {
        return;
    };
    let written = serde_json::to_vec(&value).expect("a record read writes");
    let back: T = serde_json::from_slice(&written).expect("what was written reads");
    assert_eq!(format!("{back:?}"), format!("{value:?}"));
}

/// One input: its first byte chooses what the rest is read as.
pub fn run(data: &[u8]) {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    match which % 6 {
        0 => {
            let payload = Bytes::copy_from_slice(rest);
            if let Some((head, body)) = unpack::<Forward>(&payload) {
                let again = pack(&head, &body);
                let (back, back_body) = unpack::<Forward>(&again).expect("packed reads");
                assert_eq!(
                    (back.method, back.uri, back.headers, back_body),
                    (head.method, head.uri, head.headers, body)
                );
            }
        }
        1 => {
            let payload = Bytes::copy_from_slice(rest);
            if let Some((head, body)) = unpack::<ForwardHead>(&payload) {
                let again = pack(&head, &body);
                let (back, back_body) = unpack::<ForwardHead>(&again).expect("packed reads");
                assert_eq!(format!("{back:?}"), format!("{head:?}"));
                assert_eq!(back_body, body);
            }
        }
        2 => round_trips::<RouteRecord>(rest),
        3 => round_trips::<NodeRecord>(rest),
        4 => round_trips::<Entry>(rest),
        _ => round_trips::<roost_wire::artifact::IndexEntry>(rest),
    }
}
