//! roostd's HTTP/1.1 client reading a response (head, interim 1xx heads,
//! body framing: content-length, chunked, until close) from a hostile
//! server. Beyond "no panic": the answer does not depend on how the bytes
//! were split into reads (the fuzzer's split, one read, a byte per read):
//! the same head and body, or an error each time (which error may differ:
//! a malformed head that never ends is refused as malformed in one read,
//! and as incomplete when it ends before its malformed part could be seen);
//! and a body never exceeds its cap.

use roostd::http_client::read_response;

const MAX_BODY: usize = 1 << 16;

/// A status, the headers and the body.
type Read = (u16, Vec<(String, Vec<u8>)>, Vec<u8>);

/// What a read gave, comparable across splits.
fn outcome(pieces: &[&[u8]], head_only: bool) -> Result<Read, ()> {
    read_response(pieces, head_only, MAX_BODY)
        .map(|(status, headers, body)| {
            assert!(body.len() <= MAX_BODY, "a body over its cap");
            let headers = headers
                .iter()
                .map(|(n, v)| (n.as_str().to_string(), v.as_bytes().to_vec()))
                .collect();
            (status.as_u16(), headers, body)
        })
        .map_err(|_| ())
}

/// One input.
pub fn run(data: &[u8]) {
    let Some((&flags, data)) = data.split_first() else {
        return;
    };
    let head_only = flags & 1 == 1;
    // The fuzzer's split: at each 0xFF byte (which is dropped).
    let split: Vec<&[u8]> = data.split(|&b| b == 0xFF).collect();
    let joined: Vec<u8> = split.concat();
    let whole = outcome(&[&joined], head_only);
    assert_eq!(outcome(&split, head_only), whole, "split by the fuzzer");
    if joined.len() <= 4096 {
        let bytes: Vec<&[u8]> = joined.chunks(1).collect();
        assert_eq!(outcome(&bytes, head_only), whole, "a byte per read");
    }
}
