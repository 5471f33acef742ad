#![no_main]
//! `roost_fuzz::lock_index` under libFuzzer (`scripts/fuzz`).

libfuzzer_sys::fuzz_target!(|data: &[u8]| roost_fuzz::lock_index::run(data));
