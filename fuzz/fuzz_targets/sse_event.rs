#![no_main]
//! `roost_fuzz::sse_event` under libFuzzer (`scripts/fuzz`).

libfuzzer_sys::fuzz_target!(|data: &[u8]| roost_fuzz::sse_event::run(data));
