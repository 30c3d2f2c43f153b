//! The fuzz targets' committed corpora (`fuzz/corpus/TARGET/`) replayed as ordinary tests: every
//! input a fuzzer kept goes through the same check (`fuzz/src/TARGET.rs`) in this build, so each
//! run of the tests proves them all without an instrumented build. Fuzzing itself is
//! `cargo fuzz run TARGET` in `fuzz/` (README: Fuzzing).

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::path::Path;

#[path = "../../../fuzz/src/lib.rs"]
mod fuzz;

/// Runs every input of `fuzz/corpus/TARGET/` through `check`; a finding names its input.
fn replay(target: &str, check: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target);
    let mut inputs: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .collect();
    inputs.sort();
    assert!(!inputs.is_empty(), "{} holds no inputs", dir.display());
    for input in inputs {
        let data = std::fs::read(&input).unwrap();
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| check(&data))) {
            eprintln!("the input {} fails its check", input.display());
            resume_unwind(panic);
        }
    }
}

#[test]
fn auth() {
    replay("auth", fuzz::auth::check);
}

#[test]
fn config() {
    replay("config", fuzz::config::check);
}

#[test]
fn http() {
    replay("http", fuzz::http::check);
}

#[test]
fn metadata() {
    replay("metadata", fuzz::metadata::check);
}

#[test]
fn policy_arguments() {
    replay("policy_arguments", fuzz::policy_arguments::check);
}

#[test]
fn stdio() {
    replay("stdio", fuzz::stdio::check);
}

#[test]
fn values() {
    replay("values", fuzz::values::check);
}
