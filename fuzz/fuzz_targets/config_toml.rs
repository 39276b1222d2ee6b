#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| gpuctk_fuzzing::config_toml(data));
