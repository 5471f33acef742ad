#![no_main]
//! `roost_fuzz::oauth_token` under libFuzzer (`scripts/fuzz`).

libfuzzer_sys::fuzz_target!(|data: &[u8]| roost_fuzz::oauth_token::run(data));
