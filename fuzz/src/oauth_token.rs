//! What an OAuth 2 token URL answers (a status and a body): the token
//! roostd then sends as a bearer, and how long it keeps it. Beyond "no
//! panic": a token taken is never empty and is a valid header value, its
//! lifetime lies between the minimum and a day, and an error names no more
//! than a bounded piece of what the server said.

use roostd::a2a::client::{MIN_LIFETIME_SECS, read_token_answer};

/// One input: two bytes of status, then the body.
pub fn run(data: &[u8]) {
    let Some((status, body)) = data.split_first_chunk::<2>() else {
        return;
    };
    let status = u16::from_be_bytes(*status) % 600;
    match read_token_answer(status, body) {
        Ok((token, secs)) => {
            assert!((200..300).contains(&status));
            assert!(!token.is_empty() && http_header_value(&token), "{token:?}");
            assert!((MIN_LIFETIME_SECS..=86_400).contains(&secs), "{secs}");
        }
        Err(why) => assert!(why.len() <= 400, "{} bytes of error", why.len()),
    }
}

/// A bearer token every binding's header or metadata takes: visible ASCII,
/// no space (RFC 6750's b64token is a part of it).
fn http_header_value(text: &str) -> bool {
    text.bytes().all(|b| (b'!'..=b'~').contains(&b))
}
