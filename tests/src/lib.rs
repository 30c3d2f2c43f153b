//! What moat's integration tests share: the paths of the built plugins, and a way to call them.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use moat::plugin::Plugin;
use moat::plugin::registry::Registry;
use moat::plugin::tiers::Tiers;
use moat::sandbox::limits::Limits;
use moat::supply::PluginSource;
use moat::supply::policy::Policy;
use moat::supply::source::Source;
use rmcp::model::CallToolResult;
use serde_json::Value;

pub mod floor;

/// Paths of the plugins the build script built, one constant per plugin crate.
pub mod plugins {
    include!(concat!(env!("OUT_DIR"), "/plugins.rs"));
}

/// One engine for every test in the process, as `moat serve` has.
pub fn engine() -> &'static wasmtime::Engine {
    static ENGINE: OnceLock<wasmtime::Engine> = OnceLock::new();
    ENGINE.get_or_init(|| moat::sandbox::engine::new_engine().expect("building the engine"))
}

/// Winch's tier of [`engine`], never optimized: for tests of plugins running baseline code.
pub fn baseline_tiers() -> &'static Tiers {
    static TIERS: OnceLock<Tiers> = OnceLock::new();
    TIERS.get_or_init(|| Tiers::baseline_only(engine(), None).expect("building the Winch engine"))
}

/// Loads `sources` as `moat serve` would: on Cranelift's code, or on Winch's with `tiers`.
pub fn load_on(
    sources: &[PluginSource],
    tiers: Option<&Tiers>,
) -> (Registry, Vec<moat::plugin::registry::LoadError>) {
    let fetched = sources.iter().map(|s| s.source.read_local()).collect();
    Registry::load_fetched(engine(), sources, fetched, None, tiers, &Policy::none())
        .expect("a linker")
}

/// The plugin at `path` under `name`, with the default limits and no grants.
pub fn source(name: &str, path: &str) -> PluginSource {
    PluginSource {
        name: name.into(),
        source: Source::File(path.into()),
        limits: Limits::default(),
        grants: Default::default(),
        tools: Default::default(),
    }
}

/// Loads one plugin as `moat serve` would; panics with moat's message if it does not load.
pub fn load_source(source: PluginSource) -> Arc<Plugin> {
    let (registry, errors) = Registry::load(engine(), &[source]).expect("a linker");
    if let Some(error) = errors.into_iter().next() {
        panic!("loading {}: {:#}", error.plugin, error.error);
    }
    registry.plugins()[0].clone()
}

/// Loads the plugin at `path` under `name` with the default limits.
pub fn load(name: &str, path: &str) -> Arc<Plugin> {
    load_source(source(name, path))
}

/// Loads the plugin at `path` under `name` with `limits`.
pub fn load_with(name: &str, path: &str, limits: Limits) -> Arc<Plugin> {
    load_source(PluginSource {
        limits,
        ..source(name, path)
    })
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
    load_source(PluginSource {
        limits,
        grants,
        ..source(name, path)
    })
}

/// A fresh, empty, private folder for one test (`moat-{label}-{pid}-{n}` in the system's temp
/// folder), removed with everything in it when dropped.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(label: &str) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "moat-{label}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        // Private, as moat wants its own folders (a cache folder must be).
        std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), 0o700)
            .create(&dir)
            .expect("making a temp folder");
        Self(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl std::ops::Deref for TempDir {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for TempDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
