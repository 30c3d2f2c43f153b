//! The tools of every loaded plugin, under their MCP names.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use anyhow::Result;
use wasmtime::Engine;
use wasmtime::component::Linker;

use crate::audit::AuditLog;
use crate::cache::Cache;
use crate::grants::Grants;
use crate::host;
use crate::plugin::{Limits, Plugin, Tool};
use crate::policy::Policy;
use crate::source::{Fetched, Source};

/// Where a plugin comes from and what it may use.
#[derive(Clone, Debug, PartialEq)]
pub struct PluginSource {
    pub name: String,
    pub source: Source,
    pub limits: Limits,
    pub grants: Grants,
}

/// The engine, the linker every plugin shares, and the plugins loaded on them.
pub struct Registry {
    engine: Engine,
    plugins: Vec<Arc<Plugin>>,
    /// Tool name → (plugin, tool) indexes; a `BTreeMap` so listings come out in name order.
    tools: BTreeMap<String, (usize, usize)>,
    audit: Option<Arc<AuditLog>>,
}

/// A plugin that did not load, and why.
#[derive(Debug)]
pub struct LoadError {
    pub plugin: String,
    pub error: anyhow::Error,
}

impl Registry {
    /// Loads every source, compiling them side by side. A plugin that fails is reported in the
    /// returned errors and left out; the others load all the same.
    pub fn load(engine: &Engine, sources: &[PluginSource]) -> Result<(Self, Vec<LoadError>)> {
        Self::load_cached(engine, sources, None)
    }

    /// [`Registry::load`], taking compiled plugins from `cache` when it has them. Every source
    /// must be a local file; [`Registry::load_fetched`] takes components from anywhere.
    pub fn load_cached(
        engine: &Engine,
        sources: &[PluginSource],
        cache: Option<&Cache>,
    ) -> Result<(Self, Vec<LoadError>)> {
        Self::load_checked(engine, sources, cache, &Policy::none())
    }

    /// [`Registry::load_cached`] under `policy`: each plugin's bytes are checked (signature,
    /// allow rules, manifest) before they are compiled or taken from the cache, and it loads
    /// with its effective grant.
    pub fn load_checked(
        engine: &Engine,
        sources: &[PluginSource],
        cache: Option<&Cache>,
        policy: &Policy,
    ) -> Result<(Self, Vec<LoadError>)> {
        let fetched = sources.iter().map(|s| s.source.read_local()).collect();
        Self::load_fetched(engine, sources, fetched, cache, policy)
    }

    /// Loads each source from the component fetched for it (`fetched[i]` for `sources[i]`; a
    /// failed fetch is a load error like any other), under `policy`.
    pub fn load_fetched(
        engine: &Engine,
        sources: &[PluginSource],
        fetched: Vec<Result<Fetched>>,
        cache: Option<&Cache>,
        policy: &Policy,
    ) -> Result<(Self, Vec<LoadError>)> {
        assert_eq!(sources.len(), fetched.len(), "one fetch per source");
        let mut linker = Linker::new(engine);
        host::add_to_linker(&mut linker)?;
        let load = |source: &PluginSource, fetched: Result<Fetched>| -> Result<Plugin> {
            let component = fetched?;
            let admitted = crate::policy::admit(policy, source, &component)?;
            let mut plugin = Plugin::load(
                engine,
                &linker,
                &source.name,
                &component,
                admitted.limits.clone(),
                admitted.grants.clone(),
                cache,
            )?;
            plugin.admission = admitted;
            Ok(plugin)
        };
        let results = crate::parallel::map(
            sources.iter().zip(fetched).collect(),
            |(source, fetched)| load(source, fetched),
        );

        let mut registry = Self {
            engine: engine.clone(),
            plugins: Vec::new(),
            tools: BTreeMap::new(),
            audit: None,
        };
        let mut errors = Vec::new();
        for (source, result) in sources.iter().zip(results) {
            match result {
                Ok(plugin) => registry.add(Arc::new(plugin)),
                Err(error) => errors.push(LoadError {
                    plugin: source.name.clone(),
                    error,
                }),
            }
        }
        Ok((registry, errors))
    }

    /// A registry of plugins already loaded (a reload keeps the unchanged ones); when two offer a
    /// tool of the same name, the first one keeps it.
    pub fn from_plugins(engine: &Engine, plugins: impl IntoIterator<Item = Arc<Plugin>>) -> Self {
        let mut registry = Self {
            engine: engine.clone(),
            plugins: Vec::new(),
            tools: BTreeMap::new(),
            audit: None,
        };
        for plugin in plugins {
            registry.add(plugin);
        }
        registry
    }

    fn add(&mut self, plugin: Arc<Plugin>) {
        let plugin_index = self.plugins.len();
        for (tool_index, tool) in plugin.tools.iter().enumerate() {
            if let Some(&(other, _)) = self.tools.get(&tool.name) {
                tracing::error!(
                    plugin = &*plugin.name,
                    "tool `{}` is left out: plugin \"{}\" has a tool of that name",
                    tool.name,
                    self.plugins[other].name
                );
                continue;
            }
            self.tools
                .insert(tool.name.clone(), (plugin_index, tool_index));
        }
        self.plugins.push(plugin);
    }

    /// Records every call from now on in `audit`.
    pub fn set_audit(&mut self, audit: Arc<AuditLog>) {
        self.audit = Some(audit);
    }

    pub fn audit(&self) -> Option<&AuditLog> {
        self.audit.as_deref()
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    pub fn plugins(&self) -> &[Arc<Plugin>] {
        &self.plugins
    }

    /// Every tool, in name order.
    pub fn tools(&self) -> impl Iterator<Item = (&Arc<Plugin>, &Tool)> {
        self.tools
            .values()
            .map(|&(p, t)| (&self.plugins[p], &self.plugins[p].tools[t]))
    }

    /// The tools whose names sort after `name` (every tool for `None`), in name order.
    pub fn tools_after(&self, name: Option<&str>) -> impl Iterator<Item = (&Arc<Plugin>, &Tool)> {
        let start = name.map_or(Bound::Unbounded, Bound::Excluded);
        self.tools
            .range::<str, _>((start, Bound::Unbounded))
            .map(|(_, &(p, t))| (&self.plugins[p], &self.plugins[p].tools[t]))
    }

    /// The tool named `name` and its plugin.
    pub fn find(&self, name: &str) -> Option<(&Arc<Plugin>, &Tool)> {
        let &(p, t) = self.tools.get(name)?;
        Some((&self.plugins[p], &self.plugins[p].tools[t]))
    }
}
