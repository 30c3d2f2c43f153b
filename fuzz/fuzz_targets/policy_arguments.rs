//! The fuzz target of `moat_fuzz::policy_arguments`, which says what it feeds and checks.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| moat_fuzz::policy_arguments::check(data));
