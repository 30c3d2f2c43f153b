//! Tiered compilation: a plugin not in the cache answers on Winch's code at once, Cranelift's
//! code replaces it while calls go on, lands in the cache, and serves the next start.

use std::sync::Arc;
use std::time::{Duration, Instant};

use moat::plugin::Plugin;
use moat::plugin::tiers::Tiers;
use moat::serve::reload::Loader;
use moat::supply::cache::Cache;
use moat_tests::{TempDir, baseline_tiers, call, engine, load_on, plugins, source, try_call};
use serde_json::json;

fn load_tiered(loader: &mut Loader, name: &str, path: &str) -> Arc<Plugin> {
    let outcome = loader.load(&[source(name, path)]).expect("a load");
    assert!(outcome.failed.is_empty(), "{:?}", outcome.failed);
    outcome.registry.plugins()[0].clone()
}

async fn echo(plugin: &Plugin, message: &str) -> String {
    let result = call(plugin, "echo_echo", json!({"message": message})).await;
    result.content[0].as_text().expect("text").text.clone()
}

/// Waits (up to a minute: Cranelift compiles at low priority) for the optimized code.
async fn optimized(plugin: &Plugin) {
    let give_up = Instant::now() + Duration::from_secs(60);
    while !plugin.optimized() {
        assert!(Instant::now() < give_up, "Cranelift's code never came");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_not_in_the_cache_runs_winch_code_then_cranelifts_then_starts_warm() {
    let dir = TempDir::new("tiers");
    let cache = Cache::open(dir.path()).unwrap();
    let mut loader = Loader::new(engine().clone(), Some(cache.clone()))
        .tiered()
        .unwrap();
    let plugin = load_tiered(&mut loader, "echo", plugins::ECHO);
    assert!(
        !plugin.optimized(),
        "loaded cold, it starts on Winch's code"
    );
    assert_eq!(echo(&plugin, "first").await, "first");

    // Calls go on while the code is swapped: none of them fails.
    let caller = {
        let plugin = plugin.clone();
        tokio::spawn(async move {
            let mut calls = 0;
            while !plugin.optimized() {
                assert_eq!(echo(&plugin, "during").await, "during");
                calls += 1;
            }
            calls
        })
    };
    optimized(&plugin).await;
    let during = caller.await.unwrap();
    assert!(during > 0, "no call ran on Winch's code");
    for _ in 0..3 {
        assert_eq!(echo(&plugin, "after").await, "after");
    }

    // The next start (a new loader, the same cache) takes Cranelift's code from the cache.
    let mut next = Loader::new(engine().clone(), Some(cache)).tiered().unwrap();
    let warm = load_tiered(&mut next, "echo", plugins::ECHO);
    assert!(
        warm.optimized(),
        "a warm start runs Cranelift's code at once"
    );
    assert_eq!(echo(&warm, "warm").await, "warm");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copies_of_one_plugin_are_optimized_together() {
    let dir = TempDir::new("tiers-copies");
    let cache = Cache::open(dir.path()).unwrap();
    let mut loader = Loader::new(engine().clone(), Some(cache)).tiered().unwrap();
    let outcome = loader
        .load(&[source("one", plugins::TIME), source("two", plugins::TIME)])
        .unwrap();
    assert!(outcome.failed.is_empty(), "{:?}", outcome.failed);
    for plugin in outcome.registry.plugins() {
        assert!(!plugin.optimized());
        let tool = format!("{}_now", plugin.name);
        let now = try_call(plugin, &tool, json!({})).await.unwrap();
        assert_ne!(now.is_error, Some(true), "{now:?}");
    }
    for plugin in outcome.registry.plugins() {
        optimized(plugin).await;
        let tool = format!("{}_now", plugin.name);
        let now = try_call(plugin, &tool, json!({})).await.unwrap();
        assert_ne!(now.is_error, Some(true), "{now:?}");
    }
}

/// Deadlines, memory and the rest are the hostile suite's (`hostile.rs` runs every case on
/// Winch's code too); fuel needs a metering engine, so it is here.
#[tokio::test]
async fn fuel_runs_out_on_winch_code() {
    let metering = moat::sandbox::engine::new_engine_with_fuel(true).unwrap();
    let tiers = Tiers::baseline_only(&metering, None).unwrap();
    let source = moat::supply::PluginSource {
        limits: moat::sandbox::limits::Limits {
            fuel: Some(5_000_000),
            ..Default::default()
        },
        ..source("chatty", plugins::CHATTY)
    };
    let fetched = vec![source.source.read_local()];
    let (registry, errors) = moat::plugin::registry::Registry::load_fetched(
        &metering,
        std::slice::from_ref(&source),
        fetched,
        None,
        Some(&tiers),
        &moat::supply::policy::Policy::none(),
    )
    .unwrap();
    assert!(errors.is_empty(), "{errors:?}");
    let chatty = &registry.plugins()[0];
    assert!(!chatty.optimized());
    let error = try_call(chatty, "chatty_spin", json!({}))
        .await
        .expect_err("an endless loop must run out of fuel");
    assert_eq!(
        error,
        "the tool ran out of fuel (5000000 units) and was stopped"
    );
}

/// A component Winch cannot compile (its code makes a tail call) loads on Cranelift's code at
/// once, and works.
#[tokio::test]
async fn a_component_winch_cannot_compile_runs_on_cranelift_at_once() {
    let wasm = crate::handmade::tail_call_component();
    assert!(
        wasmtime::component::Component::new(
            &moat::sandbox::engine::new_baseline_engine(engine()).unwrap(),
            &wasm
        )
        .is_err(),
        "Winch compiles tail calls now: this test proves nothing"
    );
    let dir = TempDir::new("tiers-tail-call");
    let path = dir.path().join("tail-call.wasm");
    std::fs::write(&path, wasm).unwrap();
    let (registry, errors) = load_on(
        &[source("tail", path.to_str().unwrap())],
        Some(baseline_tiers()),
    );
    assert!(errors.is_empty(), "{errors:?}");
    let plugin = &registry.plugins()[0];
    assert!(plugin.optimized());
    let ok = call(plugin, "tail_ok", json!({})).await;
    assert_eq!(ok.content[0].as_text().unwrap().text, "ok");
}
