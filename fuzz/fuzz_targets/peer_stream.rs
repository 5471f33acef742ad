#![no_main]
//! `roost_fuzz::peer_stream` under libFuzzer (`scripts/fuzz`).

libfuzzer_sys::fuzz_target!(|data: &[u8]| roost_fuzz::peer_stream::run(data));
