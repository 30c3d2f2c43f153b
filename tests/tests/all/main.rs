//! One test binary for everything: fewer link steps on small machines.

mod burn;
mod cache;
mod chatty;
mod conformance;
mod echo;
mod fetch;
mod filesystem;
mod foreign;
mod fuel;
mod handmade;
mod hostile;
mod instances;
mod layers;
mod loopback;
mod memory;
mod naming;
mod network;
mod reload;
mod schema;
mod shapes;
mod sources;
mod text;
mod time;
mod trust;
mod weather;

/// Every plugin crate is used by some test (wasmtime's `assert_test_exists`, by another route):
/// a test module names its path constant, `plugins::NAME`.
#[test]
fn every_plugin_has_a_test() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/all");
    let sources: String = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| std::fs::read_to_string(entry.unwrap().path()).unwrap())
        .collect();
    let untested: Vec<&str> = moat_tests::plugins::ALL
        .iter()
        .copied()
        .filter(|name| {
            let constant = name.to_uppercase().replace('-', "_");
            !sources.contains(&format!("plugins::{constant}"))
        })
        .collect();
    assert!(untested.is_empty(), "plugins without a test: {untested:?}");
}
