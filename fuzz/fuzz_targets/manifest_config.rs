#![no_main]
//! `roost_fuzz::manifest_config` under libFuzzer (`scripts/fuzz`).

libfuzzer_sys::fuzz_target!(|data: &[u8]| roost_fuzz::manifest_config::run(data));
