#![no_main]
//! `roost_fuzz::a2a_request` under libFuzzer (`scripts/fuzz`).

libfuzzer_sys::fuzz_target!(|data: &[u8]| roost_fuzz::a2a_request::run(data));
