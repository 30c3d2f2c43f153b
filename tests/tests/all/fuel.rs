//! Fuel: a `fuel = N` limit in `moat.toml` stops a guest after about N Wasm instructions, with an
//! error of its own; plugins without a limit run unmetered on the same engine.

use std::sync::{Arc, OnceLock};

use moat::plugin::Plugin;
use moat::plugin::registry::Registry;
use moat_tests::{TempDir, call, engine, plugins, structured, text, try_call};
use serde_json::json;

/// An engine with fuel metering, as `moat serve` builds when a plugin has a fuel limit.
fn metering_engine() -> &'static wasmtime::Engine {
    static ENGINE: OnceLock<wasmtime::Engine> = OnceLock::new();
    ENGINE.get_or_init(|| {
        moat::sandbox::engine::new_engine_with_fuel(true).expect("building the engine")
    })
}

/// A temp folder holding one `moat.toml`.
struct Config {
    dir: TempDir,
}

impl Config {
    fn new(test: &str, toml: &str) -> Self {
        let dir = TempDir::new(&format!("fuel-{test}"));
        std::fs::write(dir.join("moat.toml"), toml).unwrap();
        Self { dir }
    }

    /// Loads the config's plugins on `engine`: the plugins, and the load errors as text.
    fn load(&self, engine: &wasmtime::Engine) -> (Vec<Arc<Plugin>>, Vec<String>) {
        let sources = moat::serve::config::read(&self.dir.join("moat.toml"))
            .unwrap_or_else(|e| panic!("moat.toml: {e:#}"));
        let (registry, errors) = Registry::load(engine, &sources).expect("a linker");
        let errors = errors.iter().map(|e| format!("{:#}", e.error)).collect();
        (registry.plugins().to_vec(), errors)
    }
}

fn plugin<'a>(plugins: &'a [Arc<Plugin>], name: &str) -> &'a Arc<Plugin> {
    plugins.iter().find(|p| &*p.name == name).unwrap()
}

#[tokio::test]
async fn a_spinning_guest_runs_out_of_fuel_and_the_plugin_answers_right_after() {
    let config = Config::new(
        "spin",
        &format!(
            "[plugins.chatty]\npath = {:?}\nfuel = 5000000\n",
            plugins::CHATTY
        ),
    );
    let (plugins, errors) = config.load(metering_engine());
    assert!(errors.is_empty(), "{errors:?}");
    let chatty = plugin(&plugins, "chatty");
    let error = try_call(chatty, "chatty_spin", json!({}))
        .await
        .expect_err("an endless loop must run out of fuel");
    assert_eq!(
        error,
        "the tool ran out of fuel (5000000 units) and was stopped"
    );
    // Every call gets its fuel afresh: a small call succeeds right after.
    let result = call(chatty, "chatty_nap", json!({"ms": 0})).await;
    assert_eq!(structured(&result), &json!({"value": 0}));
}

#[tokio::test]
async fn fuel_bounds_compute_and_plugins_without_a_limit_run_unmetered() {
    let config = Config::new(
        "hash",
        &format!(
            "[plugins.frugal]\npath = {text:?}\nfuel = 1000000\n\
             [plugins.free]\npath = {text:?}\n",
            text = plugins::TEXT
        ),
    );
    let (plugins, errors) = config.load(metering_engine());
    assert!(errors.is_empty(), "{errors:?}");
    // sha256 of 1 MiB takes far more than a million instructions.
    let args = json!({"text": "fuel".repeat(1 << 18), "algorithm": "sha256"});
    let error = try_call(plugin(&plugins, "frugal"), "frugal_hash", args.clone())
        .await
        .expect_err("a million units cannot hash a mebibyte");
    assert!(error.contains("ran out of fuel (1000000 units)"), "{error}");
    let result = call(plugin(&plugins, "free"), "free_hash", args).await;
    let digest = text(&result);
    assert_eq!(digest.len(), 64, "{digest}");
    // …and with enough fuel the frugal one answers small questions.
    let result = call(
        plugin(&plugins, "frugal"),
        "frugal_hash",
        json!({"text": "abc", "algorithm": "sha256"}),
    )
    .await;
    assert_eq!(
        text(&result),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
}

#[tokio::test]
async fn a_fuel_limit_is_refused_where_it_cannot_hold() {
    let toml = format!(
        "[plugins.chatty]\npath = {:?}\nfuel = 1000\n",
        plugins::CHATTY
    );
    let config = Config::new("unmetered", &toml);
    let (plugins, errors) = config.load(engine());
    assert!(plugins.is_empty());
    assert_eq!(
        errors,
        ["plugin \"chatty\" has a fuel limit, but the engine meters no fuel"]
    );

    let zero = Config::new(
        "zero",
        &format!("[plugins.chatty]\npath = {:?}\nfuel = 0\n", plugins::CHATTY),
    );
    let error = moat::serve::config::read(&zero.dir.join("moat.toml")).unwrap_err();
    assert!(
        format!("{error:#}").contains("plugin \"chatty\": fuel must be at least 1"),
        "{error:#}"
    );
}
