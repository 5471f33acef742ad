//! What a peer's request asks for, read from either binding's envelope: a
//! JSON-RPC 2.0 body (1.0 or 0.3 method names) or an HTTP+JSON method, path,
//! query and body. Beyond "no panic": reading is deterministic; a request
//! read is written back as a JSON-RPC body that reads as the same request
//! (parse ∘ print = id); a refusal is a client error with a valid JSON-RPC
//! id and error object; `%XX`-escaped query values decode to what was
//! escaped.

use roostd::a2a::envelope::{self, Op, percent_decode};
use roostd::a2a::wire::Dialect;
use serde_json::{Value, json};

const CONTENT_TYPES: [Option<&[u8]>; 4] = [
    None,
    Some(b"application/json"),
    Some(b"Application/A2A+JSON; charset=utf-8"),
    Some(b"text/plain"),
];

/// One input.
pub fn run(data: &[u8]) {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let d = if sel & 1 == 0 {
        Dialect::V10
    } else {
        Dialect::V03
    };
    let ct = CONTENT_TYPES[usize::from(sel >> 1 & 3)];
    if sel & 0x80 == 0 {
        jsonrpc(d, ct, rest);
    } else {
        http_json(sel, ct, rest);
    }
}

fn valid_id(id: &Value) -> bool {
    matches!(id, Value::String(_) | Value::Number(_) | Value::Null)
}

fn jsonrpc(d: Dialect, ct: Option<&[u8]>, body: &[u8]) {
    let first = envelope::jsonrpc(d, ct, body);
    let again = envelope::jsonrpc(d, ct, body);
    assert_eq!(format!("{first:?}"), format!("{again:?}"));
    match first {
        Ok(r) => {
            assert_ne!(
                ct,
                Some(b"text/plain".as_slice()),
                "a non-JSON body was read"
            );
            assert!(r.params.is_object() && valid_id(&r.id));
            let printed =
                json!({"jsonrpc": "2.0", "id": r.id, "method": r.op.method(d), "params": r.params});
            let back = envelope::jsonrpc(d, None, printed.to_string().as_bytes())
                .expect("a request written back reads again");
            assert_eq!(back, r);
        }
        Err((id, e)) => {
            assert!(valid_id(&id), "an error answered with id {id}");
            let rpc = e.rpc(d);
            assert!(rpc["code"].is_i64() && rpc["message"].is_string());
            assert!(
                e.http_status().is_client_error(),
                "{e:?} is not the peer's fault"
            );
        }
    }
}

fn http_json(sel: u8, ct: Option<&[u8]>, rest: &[u8]) {
    let method = ["GET", "POST", "DELETE", "PUT"][usize::from(sel >> 3 & 3)];
    let (head, body) = match rest.iter().position(|&b| b == b'\n') {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, &b""[..]),
    };
    let Ok(head) = std::str::from_utf8(head) else {
        return;
    };
    let (path, query) = match head.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (head, None),
    };
    let first = envelope::rest(method, path, query, ct, body);
    let again = envelope::rest(method, path, query, ct, body);
    assert_eq!(format!("{first:?}"), format!("{again:?}"));
    match first {
        Ok(r) => {
            assert!(r.params.is_object());
            if r.op == Op::Get {
                assert_eq!(r.params["id"].as_str(), path.strip_prefix("tasks/"));
            }
            if matches!(r.op, Op::Send | Op::Stream) && !body.is_empty() {
                assert_ne!(
                    ct,
                    Some(b"text/plain".as_slice()),
                    "a non-JSON body was read"
                );
            }
        }
        Err(e) => assert!(
            e.http_status().is_client_error(),
            "{e:?} is not the peer's fault"
        ),
    }
    // Every byte escaped decodes to the text that was escaped.
    let escaped: String = head.bytes().map(|b| format!("%{b:02X}")).collect();
    assert_eq!(percent_decode(&escaped), head);
    let plus = head.replace('+', "%2B").replace(' ', "+");
    if !head.contains('%') {
        assert_eq!(percent_decode(&plus), head);
    }
}
