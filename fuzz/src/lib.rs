//! The fuzz targets, one module each with `run(&[u8])`: what roostd reads
//! from those it does not trust (peers, clients, registries, NATS, token
//! URLs, capsule authors), each with the properties it must keep beyond
//! "no panic". `fuzz_targets/` runs them under libFuzzer (`scripts/fuzz`);
//! `tests/smoke.rs` runs them over their seeds in the normal suite.

pub mod a2a_message;
pub mod a2a_request;
pub mod bundle;
pub mod checkpoint;
pub mod cluster_records;
pub mod grpc_message;
pub mod http_response;
pub mod lock_index;
pub mod manifest_config;
pub mod oauth_token;
pub mod peer_stream;
pub mod schedule_times;
pub mod sse_event;

/// One target's input.
pub type Target = fn(&[u8]);

/// Every target by name, as `fuzz/seeds/<name>/` and `fuzz_targets/` name it.
pub const TARGETS: &[(&str, Target)] = &[
    ("a2a_message", a2a_message::run),
    ("a2a_request", a2a_request::run),
    ("bundle", bundle::run),
    ("checkpoint", checkpoint::run),
    ("cluster_records", cluster_records::run),
    ("grpc_message", grpc_message::run),
    ("http_response", http_response::run),
    ("lock_index", lock_index::run),
    ("manifest_config", manifest_config::run),
    ("oauth_token", oauth_token::run),
    ("peer_stream", peer_stream::run),
    ("schedule_times", schedule_times::run),
    ("sse_event", sse_event::run),
];
