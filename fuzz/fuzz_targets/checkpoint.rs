#![no_main]
//! `roost_fuzz::checkpoint` under libFuzzer (`scripts/fuzz`).

libfuzzer_sys::fuzz_target!(|data: &[u8]| roost_fuzz::checkpoint::run(data));
