#![no_main]
//! `roost_fuzz::cluster_records` under libFuzzer (`scripts/fuzz`).

libfuzzer_sys::fuzz_target!(|data: &[u8]| roost_fuzz::cluster_records::run(data));
