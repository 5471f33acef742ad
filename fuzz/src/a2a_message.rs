//! What an A2A peer sends: a message (1.0 or 0.3 shape) as the gateway
//! parses it, the `A2A-Version` header and task state names. Beyond "no
//! panic": parsing is deterministic, and a state name parsed is printed back
//! as a name that parses to the same state in both dialects.

use roostd::a2a::wire::{Dialect, parse_message, parse_state, state_name};

/// One input.
pub fn run(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = Dialect::from_header(Some(text));
        if let Some(state) = parse_state(text) {
            for dialect in [Dialect::V10, Dialect::V03] {
                assert_eq!(parse_state(state_name(state, dialect)), Some(state));
            }
        }
    }
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let first = parse_message(&value)
        .map(|m| format!("{m:?}"))
        .map_err(|e| e.to_string());
    let again = parse_message(&value)
        .map(|m| format!("{m:?}"))
        .map_err(|e| e.to_string());
    assert_eq!(first, again);
    // The same message inside a JSON-RPC `params`, as `SendMessage` carries it.
    if let Some(message) = value.get("message") {
        let _ = parse_message(message);
    }
}
