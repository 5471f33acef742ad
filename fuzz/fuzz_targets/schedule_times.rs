#![no_main]
//! `roost_fuzz::schedule_times` under libFuzzer (`scripts/fuzz`).

libfuzzer_sys::fuzz_target!(|data: &[u8]| roost_fuzz::schedule_times::run(data));
