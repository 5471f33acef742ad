#![no_main]
//! `roost_fuzz::a2a_message` under libFuzzer (`scripts/fuzz`).

libfuzzer_sys::fuzz_target!(|data: &[u8]| roost_fuzz::a2a_message::run(data));
