#![no_main]
//! `roost_fuzz::bundle` under libFuzzer (`scripts/fuzz`).

libfuzzer_sys::fuzz_target!(|data: &[u8]| roost_fuzz::bundle::run(data));
