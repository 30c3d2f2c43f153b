//! The fuzz targets' checks, one module each (`check` runs one input and panics on a finding),
//! and what they share: a registry with no plugins, and a runtime to serve it on.
//!
//! The fuzzers in `fuzz_targets/` call them; so does the test `fuzz_corpora` of the main
//! workspace, which runs every committed input of `corpus/` through them in an ordinary build.

pub mod auth;
pub mod config;
pub mod http;
pub mod metadata;
pub mod policy_arguments;
pub mod stdio;
pub mod values;

use std::sync::{Arc, LazyLock};

use moat::mcp::catalogue::Catalogue;
use moat::plugin::registry::Registry;

/// One current-thread runtime for every input: each input runs to its end on it.
pub static RUNTIME: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
});

/// A catalogue of zero plugins: the protocol handling, without compiling a component per input.
pub static CATALOGUE: LazyLock<Catalogue> = LazyLock::new(|| {
    let engine = wasmtime::Engine::default();
    let (registry, errors) = Registry::load(&engine, &[]).expect("an empty registry");
    assert!(errors.is_empty());
    Catalogue::from(Arc::new(registry))
});
