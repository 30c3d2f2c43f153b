//! The tools of every loaded plugin, under their MCP names.
//!
//! A tool name reaches exactly one plugin, and never silently another: when two plugins offer a
//! tool of one name, the later of them is refused as a whole (a load error naming both plugins
//! and the tool). "Later" is deterministic: a plugin already serving the name keeps it (on a
//! reload); otherwise the plugin whose name sorts first keeps it. `[plugins.NAME.tools]` in
//! moat.toml renames or hides a tool to settle the clash (see [`crate::wit::naming`]).

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use wasmtime::Engine;
use wasmtime::component::Linker;

use crate::plugin::prompts::Prompt;
use crate::plugin::resources::{Located, Resource};
use crate::plugin::tiers::{Compiler, Tiers};
use crate::plugin::{Plugin, Tool};
use crate::sandbox::host;
use crate::supply::PluginSource;
use crate::supply::cache::Cache;
use crate::supply::lock::{self, Lock};
use crate::supply::policy::Policy;
use crate::supply::source::Fetched;

/// The engine, the linker every plugin shares, and the plugins loaded on them.
pub struct Registry {
    engine: Engine,
    plugins: Vec<Arc<Plugin>>,
    /// Tool name → (plugin, tool) indexes; a `BTreeMap` so listings come out in name order.
    tools: BTreeMap<String, (usize, usize)>,
    /// Prompt name → (plugin, prompt) indexes, as for tools.
    prompts: BTreeMap<String, (usize, usize)>,
    /// Resource URI scheme → plugin index, for the plugins that have resources.
    schemes: HashMap<String, usize>,
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
        Self::load_fetched(engine, sources, fetched, cache, None, policy)
    }

    /// Loads each source from the component fetched for it (`fetched[i]` for `sources[i]`; a
    /// failed fetch is a load error like any other), under `policy`; with `tiers`, a plugin
    /// not in `cache` runs Winch's code first (see [`crate::plugin::tiers`]).
    pub fn load_fetched(
        engine: &Engine,
        sources: &[PluginSource],
        fetched: Vec<Result<Fetched>>,
        cache: Option<&Cache>,
        tiers: Option<&Tiers>,
        policy: &Policy,
    ) -> Result<(Self, Vec<LoadError>)> {
        let (plugins, mut errors) = Self::compile(engine, sources, fetched, cache, tiers, policy)?;
        let (registry, refused) = Self::from_plugins(engine, plugins, &HashMap::new());
        errors.extend(refused);
        Ok((registry, errors))
    }

    /// Compiles each source from the component fetched for it, side by side, without yet
    /// deciding which plugin gets which tool name (see [`Registry::from_plugins`]).
    pub fn compile(
        engine: &Engine,
        sources: &[PluginSource],
        fetched: Vec<Result<Fetched>>,
        cache: Option<&Cache>,
        tiers: Option<&Tiers>,
        policy: &Policy,
    ) -> Result<(Vec<Arc<Plugin>>, Vec<LoadError>)> {
        assert_eq!(sources.len(), fetched.len(), "one fetch per source");
        let mut linker = Linker::new(engine);
        host::add_to_linker(&mut linker)?;
        let compiler = Compiler {
            engine,
            linker: &linker,
            cache,
            tiers,
        };
        let load = |source: &PluginSource, fetched: Result<Fetched>| -> Result<Plugin> {
            let component = fetched?;
            let admitted = crate::supply::policy::admit(policy, source, &component)?;
            let mut plugin = Plugin::load(
                &compiler,
                &source.name,
                &component,
                admitted.limits.clone(),
                admitted.grants.clone(),
                &source.tools,
            )?;
            plugin.admission = admitted;
            Ok(plugin)
        };
        // A plugin's bytes go through parsers moat does not own (wasmparser, wit-parser,
        // wasmtime); one that panics on them refuses that plugin, never the load of the others.
        let contained = |source: &PluginSource, fetched| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| load(source, fetched)))
                .unwrap_or_else(|panic| {
                    let why = panic
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_default();
                    Err(anyhow::anyhow!(
                        "plugin \"{}\" is not loaded: reading it failed inside moat ({why})",
                        source.name
                    ))
                })
        };
        let _loading = tiers.map(Tiers::loading);
        let results = crate::parallel::map(
            sources.iter().zip(fetched).collect(),
            |(source, fetched)| contained(source, fetched),
        );
        // The compilers' scratch memory is freed; without this an idle server would keep it.
        crate::memory::release_freed();

        let mut plugins = Vec::new();
        let mut errors = Vec::new();
        for (source, result) in sources.iter().zip(results) {
            match result {
                Ok(plugin) => plugins.push(Arc::new(plugin)),
                Err(error) => errors.push(LoadError {
                    plugin: source.name.clone(),
                    error,
                }),
            }
        }
        Ok((plugins, errors))
    }

    /// A registry of plugins already loaded (a reload keeps the unchanged ones). `served` maps
    /// each tool name served until now to its plugin: that plugin keeps the name. Any other
    /// plugin offering a name already taken is refused as a whole, the plugins being taken in
    /// name order; the refusals are returned.
    pub fn from_plugins(
        engine: &Engine,
        plugins: impl IntoIterator<Item = Arc<Plugin>>,
        served: &HashMap<String, String>,
    ) -> (Self, Vec<LoadError>) {
        let mut plugins: Vec<Arc<Plugin>> = plugins.into_iter().collect();
        plugins.sort_by(|a, b| a.name.cmp(&b.name));
        let mut registry = Self {
            engine: engine.clone(),
            plugins: Vec::new(),
            tools: BTreeMap::new(),
            prompts: BTreeMap::new(),
            schemes: HashMap::new(),
        };
        let mut refused = Vec::new();
        for plugin in &plugins {
            match registry.clash(plugin, &plugins, served) {
                None => registry.add(plugin.clone()),
                Some(error) => refused.push(LoadError {
                    plugin: plugin.name.to_string(),
                    error,
                }),
            }
        }
        (registry, refused)
    }

    /// Why `plugin` may not join: one of its tool names is taken, or belongs to another of
    /// `candidates` that served it until now.
    fn clash(
        &self,
        plugin: &Plugin,
        candidates: &[Arc<Plugin>],
        served: &HashMap<String, String>,
    ) -> Option<anyhow::Error> {
        if let Some(prompt) = plugin
            .prompts
            .iter()
            .find(|p| self.prompts.contains_key(&p.name))
        {
            let (other, _) = self.prompts[&prompt.name];
            return Some(anyhow::anyhow!(
                "plugin \"{}\" is not loaded: its prompt `{}` has the name of a prompt of plugin \
                 \"{}\"",
                plugin.name,
                prompt.name,
                self.plugins[other].name
            ));
        }
        if !plugin.resources.is_empty()
            && let Some(&other) = self.schemes.get(&*plugin.scheme)
        {
            return Some(anyhow::anyhow!(
                "plugin \"{}\" is not loaded: its resources would share the URI scheme `{}:` \
                 with those of plugin \"{}\"",
                plugin.name,
                plugin.scheme,
                self.plugins[other].name
            ));
        }
        plugin.tools.iter().find_map(|tool| {
            let (owner, why) = match self.tools.get(&tool.name) {
                Some(&(other, _)) => (self.plugins[other].name.to_string(), ""),
                None => {
                    let owner = served.get(&tool.name).filter(|o| **o != *plugin.name)?;
                    let rival = candidates.iter().find(|p| *p.name == **owner)?;
                    rival.tools.iter().find(|t| t.name == tool.name)?;
                    (owner.clone(), ", which was serving it already")
                }
            };
            Some(anyhow::anyhow!(
                "plugin \"{}\" is not loaded: its tool `{}` has the name of a tool of plugin \
                 \"{owner}\"{why}, and a call must never reach the wrong plugin; rename or hide \
                 one of them in moat.toml, e.g. [plugins.{}.tools] {} = {{ name = \"…\" }} \
                 (or {{ hide = true }})",
                plugin.name,
                tool.name,
                plugin.name,
                tool.name,
            ))
        })
    }

    /// Adds `plugin`, every one of whose tool names is free.
    fn add(&mut self, plugin: Arc<Plugin>) {
        let plugin_index = self.plugins.len();
        for (tool_index, tool) in plugin.tools.iter().enumerate() {
            let previous = self
                .tools
                .insert(tool.name.clone(), (plugin_index, tool_index));
            debug_assert!(previous.is_none(), "clash() let a taken name through");
        }
        for (prompt_index, prompt) in plugin.prompts.iter().enumerate() {
            self.prompts
                .insert(prompt.name.clone(), (plugin_index, prompt_index));
        }
        if !plugin.resources.is_empty() {
            self.schemes.insert(plugin.scheme.to_string(), plugin_index);
        }
        self.plugins.push(plugin);
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

    /// Every prompt, in name order.
    pub fn prompts(&self) -> impl Iterator<Item = (&Arc<Plugin>, &Prompt)> {
        self.prompts
            .values()
            .map(|&(p, i)| (&self.plugins[p], &self.plugins[p].prompts[i]))
    }

    /// The prompt named `name` and its plugin.
    pub fn find_prompt(&self, name: &str) -> Option<(&Arc<Plugin>, &Prompt)> {
        let &(p, i) = self.prompts.get(name)?;
        Some((&self.plugins[p], &self.plugins[p].prompts[i]))
    }

    /// Every resource and template, by plugin name, then resource name.
    pub fn resources(&self) -> impl Iterator<Item = (&Arc<Plugin>, &Resource)> {
        self.plugins
            .iter()
            .flat_map(|plugin| plugin.resources.iter().map(move |r| (plugin, r)))
    }

    /// The resource at `uri`, its plugin and the template's variables: the scheme names the
    /// plugin (in any case, as schemes are), the rest is matched against its resources.
    pub fn find_resource(&self, uri: &str) -> Option<Located<'_>> {
        let (scheme, path) = uri.split_once("://")?;
        let &p = self.schemes.get(&scheme.to_ascii_lowercase())?;
        let plugin = &self.plugins[p];
        let (resource, variables) = plugin.find_resource(path)?;
        Some((plugin, resource, variables))
    }

    /// The lock for plugins loaded from `sources`, every one of which must be here; `base` is the
    /// lock file's folder.
    pub fn lock(&self, sources: &[PluginSource], base: &Path) -> Result<Lock> {
        let mut plugins = BTreeMap::new();
        for source in sources {
            let plugin = self
                .plugins
                .iter()
                .find(|p| *p.name == source.name)
                .with_context(|| format!("plugin \"{}\" did not load", source.name))?;
            plugins.insert(source.name.clone(), plugin.lock_entry(&source.source, base));
        }
        Ok(Lock {
            version: lock::VERSION,
            plugins,
        })
    }
}
