//! What moat's integration tests share: the paths of the built plugins, and a way to call them.

use std::sync::{Arc, OnceLock};

use moat::plugin::Plugin;
use moat::plugin::registry::Registry;
use moat::sandbox::limits::Limits;
use moat::supply::PluginSource;
use moat::supply::source::Source;
use rmcp::model::CallToolResult;
use serde_json::Value;

/// Paths of the plugins the build script built, one constant per plugin crate.
pub mod plugins {
    include!(concat!(env!("OUT_DIR"), "/plugins.rs"));
}

/// One engine for every test in the process, as `moat serve` has.
pub fn engine() -> &'static wasmtime::Engine {
    static ENGINE: OnceLock<wasmtime::Engine> = OnceLock::new();
    ENGINE.get_or_init(|| moat::sandbox::engine::new_engine().expect("building the engine"))
}

/// Loads the plugin at `path` under `name` with the default limits.
pub fn load(name: &str, path: &str) -> Arc<Plugin> {
    load_with(name, path, Limits::default())
}

/// Loads the plugin at `path` under `name` with `limits`.
pub fn load_with(name: &str, path: &str, limits: Limits) -> Arc<Plugin> {
    let source = PluginSource {
        name: name.into(),
        source: Source::File(path.into()),
        limits,
        grants: Default::default(),
        tools: Default::default(),
    };
    let (registry, errors) = Registry::load(engine(), &[source]).expect("a linker");
    if let Some(error) = errors.into_iter().next() {
        panic!("loading {path}: {:#}", error.error);
    }
    registry.plugins()[0].clone()
}

/// Calls `tool` (its MCP name) with `args`; panics if the call itself fails.
pub async fn call(plugin: &Plugin, tool: &str, args: Value) -> CallToolResult {
    try_call(plugin, tool, args)
        .await
        .unwrap_or_else(|e| panic!("calling {tool}: {e}"))
}

/// Calls `tool` with `args`, returning the call's error as a string.
pub async fn try_call(plugin: &Plugin, tool: &str, args: Value) -> Result<CallToolResult, String> {
    let tool = plugin
        .tools
        .iter()
        .find(|t| t.name == tool)
        .unwrap_or_else(|| panic!("{} has no tool {tool}", plugin.name));
    let Value::Object(args) = args else {
        panic!("arguments must be an object");
    };
    plugin
        .call(tool, Some(&args), None)
        .await
        .map_err(|e| e.to_string())
}

/// The structured content of a successful result.
pub fn structured(result: &CallToolResult) -> &Value {
    assert_ne!(result.is_error, Some(true), "the call failed: {result:?}");
    result
        .structured_content
        .as_ref()
        .unwrap_or_else(|| panic!("no structured content in {result:?}"))
}

/// The text of the first content block.
pub fn text(result: &CallToolResult) -> &str {
    &result.content[0]
        .as_text()
        .unwrap_or_else(|| panic!("no text content in {result:?}"))
        .text
}

/// Loads the plugin at `path` under `name` with `limits` and `grants`.
pub fn load_granted(
    name: &str,
    path: &str,
    limits: Limits,
    grants: moat::sandbox::grants::Grants,
) -> Arc<Plugin> {
    let source = PluginSource {
        name: name.into(),
        source: Source::File(path.into()),
        limits,
        grants,
        tools: Default::default(),
    };
    let (registry, errors) = Registry::load(engine(), &[source]).expect("a linker");
    if let Some(error) = errors.into_iter().next() {
        panic!("loading {path}: {:#}", error.error);
    }
    registry.plugins()[0].clone()
}
