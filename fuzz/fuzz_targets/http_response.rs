#![no_main]
//! `roost_fuzz::http_response` under libFuzzer (`scripts/fuzz`).

libfuzzer_sys::fuzz_target!(|data: &[u8]| roost_fuzz::http_response::run(data));
