#![no_main]
//! `roost_fuzz::grpc_message` under libFuzzer (`scripts/fuzz`).

libfuzzer_sys::fuzz_target!(|data: &[u8]| roost_fuzz::grpc_message::run(data));
