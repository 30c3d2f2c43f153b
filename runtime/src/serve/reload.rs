//! Serving what is on disk: what `moat serve` was asked to serve ([`Served`]), and the [`Loader`]
//! that loads it, first and at every reload ([`crate::serve::watch`] starts those).
//!
//! A reload reads the sources again and builds a new registry next to the one being served:
//! a plugin whose bytes and settings are unchanged keeps its loaded `Arc<Plugin>` (nothing is
//! compiled again), a new or changed one is compiled, a removed one is dropped. Nothing that
//! already works is lost to a bad edit: a config file that does not parse changes nothing, and a
//! plugin file that no longer loads leaves the version loaded before in service. The new registry
//! then replaces the old one in the [`Catalogue`](crate::mcp::catalogue::Catalogue), which tells the clients when the tool list
//! changed.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Result, bail};
use wasmtime::Engine;

use crate::plugin::Plugin;
use crate::plugin::registry::{LoadError, Registry};
use crate::plugin::tiers::Tiers;
use crate::serve::config::{self, Config};
use crate::supply::PluginSource;
use crate::supply::cache::Cache;
use crate::supply::lock::Lock;
use crate::supply::policy::Policy;
use crate::supply::source::{Fetched, Fetcher, Source, fetch_all};

/// What `moat serve` was asked to serve.
#[derive(Clone, Debug, Default)]
pub struct Served {
    /// Plugin files, and folders whose every `.wasm` file is a plugin.
    pub paths: Vec<PathBuf>,
    /// A `moat.toml`.
    pub config: Option<PathBuf>,
    /// A secrets file for `${secret:NAME}` in it, instead of the one it names.
    pub secrets: Option<PathBuf>,
    /// Tools the enterprise policy denies every caller.
    pub denied_tools: Vec<String>,
}

/// Whether this process said that the config has no lock file: one moat serves one config.
static NO_LOCK_SAID: AtomicBool = AtomicBool::new(false);

impl Served {
    /// The config and its secrets file, each read once: what one start or reload serves (all
    /// defaults without a config).
    pub fn read(&self) -> Result<Config> {
        match &self.config {
            Some(path) => config::load(path, self.secrets.as_deref()),
            None => Ok(Config::default()),
        }
    }

    /// The plugins these name now; two plugins of one name are an error.
    pub fn sources(&self) -> Result<Vec<PluginSource>> {
        let plugins = match &self.config {
            Some(path) => config::read_with_secrets(path, self.secrets.as_deref())?,
            None => Vec::new(),
        };
        Ok(self.sources_split(plugins)?.0)
    }

    /// Every plugin's component, those named here and `plugins` (the config's, as
    /// [`Served::read`] read them), fetched (from its file, URL or registry) and, for the plugins
    /// of the config, checked against the lock file beside it.
    pub async fn fetch(
        &self,
        plugins: Vec<PluginSource>,
    ) -> Result<(Vec<PluginSource>, Vec<Result<Fetched>>)> {
        let (sources, named) = self.sources_split(plugins)?;
        let fetcher = Fetcher::from_env();
        let mut fetched = fetch_all(&fetcher, &sources).await;
        if let Some(path) = &self.config {
            let lock_path = Lock::path_for(path);
            match Lock::read(&lock_path)? {
                // Only moat.toml's plugins are pinned; those named on the command line are not.
                Some(lock) => lock.enforce(
                    path.parent().unwrap_or(Path::new("")),
                    &sources[named..],
                    &mut fetched[named..],
                ),
                // Said once: a reload that finds it still missing brings no news.
                None if !NO_LOCK_SAID.swap(true, Ordering::Relaxed) => tracing::info!(
                    "no {}: the plugins of {} are not pinned (`moat lock` pins them)",
                    lock_path.display(),
                    path.display()
                ),
                None => tracing::debug!("still no {}", lock_path.display()),
            }
        }
        Ok((sources, fetched))
    }

    /// The sources, `plugins` (the config's) after those of the command line, and how many of
    /// them come first from the command line.
    fn sources_split(&self, plugins: Vec<PluginSource>) -> Result<(Vec<PluginSource>, usize)> {
        let args: Vec<String> = self
            .paths
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
        let mut sources = config::sources_from_args(&args)?;
        let named = sources.len();
        sources.extend(plugins);
        let mut names = HashSet::new();
        if let Some(dup) = sources.iter().find(|s| !names.insert(s.name.clone())) {
            bail!(
                "two plugins are named \"{}\"; give one another name in moat.toml",
                dup.name
            );
        }
        Ok((sources, named))
    }
}

/// Loads plugins, and keeps each one loaded for as long as its file and settings stay the same.
pub struct Loader {
    engine: Engine,
    cache: Option<Cache>,
    /// How a plugin not in the cache is compiled: Winch first, if set (see [`Loader::tiered`]).
    tiers: Option<Tiers>,
    /// Every load, the first and each reload, is admitted by the same policy.
    policy: Policy,
    /// What no plugin may be granted write access to (see [`Loader::with_protected`]).
    protected: Vec<PathBuf>,
    /// What no plugin may be granted even read access to (see [`Loader::with_private`]).
    private: Vec<PathBuf>,
    /// The plugins of the last load, by name.
    loaded: HashMap<String, Loaded>,
}

struct Loaded {
    origin: Origin,
    plugin: Arc<Plugin>,
}

/// What a loaded plugin was made from; it is reused only when all of this is the same.
#[derive(PartialEq)]
struct Origin {
    digest: String,
    /// A new, changed or removed signature is admitted anew.
    signature: Option<String>,
    /// The source's name, path, limits and grants, compared by value: a changed secret in an
    /// injected header or an environment value is a change (their `Debug` form hides them), and
    /// so is a granted directory whose path now names another directory.
    settings: PluginSource,
}

impl Origin {
    fn of(source: &PluginSource, fetched: &Fetched) -> Self {
        Self {
            digest: fetched.digest.to_string(),
            signature: fetched.signature.clone(),
            settings: source.clone(),
        }
    }
}

/// What one load did.
pub struct Outcome {
    pub registry: Registry,
    /// Plugins compiled (or taken from the disk cache) by this load: each says which
    /// ([`Plugin::from_cache`]).
    pub compiled: Vec<String>,
    /// Plugins whose loaded version was reused as it was.
    pub unchanged: Vec<String>,
    /// Plugins that failed to load. Those named in `kept` are still served in their previous
    /// version; the others are not served.
    pub failed: Vec<LoadError>,
    pub kept: Vec<String>,
    /// Plugins served before and no longer named by any source.
    pub removed: Vec<String>,
}

impl Loader {
    pub fn new(engine: Engine, cache: Option<Cache>) -> Self {
        Self {
            engine,
            cache,
            tiers: None,
            policy: Policy::none(),
            protected: Vec::new(),
            private: Vec::new(),
            loaded: HashMap::new(),
        }
    }

    /// Runs a plugin whose compiled code is not in the cache on Winch's code at once, and on
    /// Cranelift's when the optimizer has made it (see [`crate::plugin::tiers`]).
    pub fn tiered(mut self) -> Result<Self> {
        self.tiers = Some(Tiers::new(&self.engine, self.cache.clone())?);
        Ok(self)
    }

    /// Loads under `policy` instead of none.
    pub fn with_policy(mut self, policy: Policy) -> Self {
        self.policy = policy;
        self
    }

    /// Refuses every plugin with a writable directory grant that contains one of `paths`: the
    /// files that decide what plugins get (moat.toml, its lock, secrets, policy), the audit log
    /// and the compiled-plugin cache (downloads included), and the files and folders named on the
    /// command line. A plugin able to write them could widen its own grants at the next reload,
    /// or plant native code in the cache. The component and signature files of the local
    /// plugins being served are protected by every load on top of these.
    pub fn with_protected(mut self, paths: impl IntoIterator<Item = PathBuf>) -> Self {
        self.protected = paths.into_iter().map(|path| canonical(&path)).collect();
        self
    }

    /// Refuses every plugin with any directory grant, read-only too, that contains one of
    /// `paths`: the audit log, whose lines tell what every plugin was asked and by whom.
    pub fn with_private(mut self, paths: impl IntoIterator<Item = PathBuf>) -> Self {
        self.private = paths.into_iter().map(|path| canonical(&path)).collect();
        self
    }

    /// Why `source` may not load under [`Loader::with_protected`] and
    /// [`Loader::with_private`], if it may not. `plugin_files` are the component and signature
    /// files of the plugins this load serves: a plugin able to write one could replace that
    /// plugin's code, which the next reload would run with that plugin's grants.
    fn exposure(&self, source: &PluginSource, plugin_files: &[PathBuf]) -> Option<anyhow::Error> {
        let private = source.grants.files.iter().find_map(|grant| {
            let private = self.private.iter().find(|p| p.starts_with(&grant.host))?;
            Some((grant, private))
        });
        if let Some((grant, private)) = private {
            return Some(anyhow::anyhow!(
                "plugin \"{}\" is not loaded: its grant of {} contains {}, which records every \
                 plugin's calls; grant a folder that does not contain it",
                source.name,
                grant.host.display(),
                private.display()
            ));
        }
        let writable_over = |paths: &[PathBuf]| {
            source.grants.files.iter().find_map(|grant| {
                let path = paths
                    .iter()
                    .find(|path| grant.writable && path.starts_with(&grant.host))?;
                Some((grant, path.clone()))
            })
        };
        if let Some((grant, protected)) = writable_over(&self.protected) {
            return Some(anyhow::anyhow!(
                "plugin \"{}\" is not loaded: its writable grant of {} contains {}, which \
                 decides what plugins may do; grant a folder that does not contain it, or grant \
                 it read-only",
                source.name,
                grant.host.display(),
                protected.display()
            ));
        }
        let (grant, file) = writable_over(plugin_files)?;
        Some(anyhow::anyhow!(
            "plugin \"{}\" is not loaded: its writable grant of {} contains {}, a plugin file \
             moat serves, which it could replace with code of its own; grant a folder that does \
             not contain it, or grant it read-only",
            source.name,
            grant.host.display(),
            file.display()
        ))
    }

    /// Loads `sources` (names unique, as [`Served::sources`] makes them), reusing every plugin of
    /// the previous load whose bytes and settings are unchanged, and the previous version of any
    /// plugin that fails now. Blocks while compiling.
    pub fn load(&mut self, sources: &[PluginSource]) -> Result<Outcome> {
        let fetched = sources.iter().map(|s| s.source.read_local()).collect();
        self.load_fetched(sources, fetched)
    }

    /// [`Loader::load`] with each source's component already fetched (`fetched[i]` for
    /// `sources[i]`).
    pub fn load_fetched(
        &mut self,
        sources: &[PluginSource],
        fetched: Vec<Result<Fetched>>,
    ) -> Result<Outcome> {
        let mut components: HashMap<usize, Fetched> = HashMap::new();
        let mut chosen: Vec<Option<Arc<Plugin>>> = vec![None; sources.len()];
        let mut unchanged = Vec::new();
        let mut failed = Vec::new();
        let mut to_compile = Vec::new();
        assert_eq!(sources.len(), fetched.len(), "one fetch per source");
        let writable: Vec<&Path> = sources
            .iter()
            .flat_map(|s| &s.grants.files)
            .filter(|grant| grant.writable)
            .map(|grant| grant.host.as_path())
            .collect();
        let plugin_files = plugin_files(sources);
        for (index, (source, fetched)) in sources.iter().zip(fetched).enumerate() {
            if let Some(error) = self
                .exposure(source, &plugin_files)
                .or_else(|| redirection(source, &writable))
            {
                failed.push(LoadError {
                    plugin: source.name.clone(),
                    error,
                });
                continue;
            }
            match fetched {
                Ok(component) => {
                    let origin = Origin::of(source, &component);
                    match self.loaded.get(&source.name) {
                        Some(loaded) if loaded.origin == origin => {
                            chosen[index] = Some(loaded.plugin.clone());
                            unchanged.push(source.name.clone());
                        }
                        _ => {
                            components.insert(index, component);
                            to_compile.push((index, origin));
                        }
                    }
                }
                Err(error) => failed.push(LoadError {
                    plugin: source.name.clone(),
                    error,
                }),
            }
        }

        // Plugins are compiled side by side; the same bytes served under several names are
        // compiled once, and the copies then come from the disk cache (when tiered, Winch
        // compiles each copy, and the optimizer compiles the bytes once for all of them).
        let mut digests = HashSet::new();
        let (first, copies): (Vec<_>, Vec<_>) = to_compile
            .iter()
            .partition(|(_, origin)| digests.insert(origin.digest.clone()));
        let mut fresh: HashMap<String, Arc<Plugin>> = HashMap::new();
        for round in [first, copies] {
            let batch: Vec<PluginSource> = round
                .iter()
                .map(|&&(index, _)| sources[index].clone())
                .collect();
            let components = round
                .iter()
                .map(|&&(index, _)| Ok(components.remove(&index).expect("fetched once")))
                .collect();
            let (plugins, errors) = Registry::compile(
                &self.engine,
                &batch,
                components,
                self.cache.as_ref(),
                self.tiers.as_ref(),
                &self.policy,
            )?;
            failed.extend(errors.into_iter().map(|mut failure| {
                if let Some(source) = batch.iter().find(|s| s.name == failure.plugin) {
                    failure.error = failure.error.context(source.source.to_string());
                }
                failure
            }));
            fresh.extend(
                plugins
                    .into_iter()
                    .map(|plugin| (plugin.name.to_string(), plugin)),
            );
        }
        let mut origins = HashMap::new();
        let mut compiled = Vec::new();
        for (index, origin) in to_compile {
            let name = sources[index].name.as_str();
            if let Some(plugin) = fresh.remove(name) {
                chosen[index] = Some(plugin);
                origins.insert(name.to_string(), origin);
                compiled.push(name.to_string());
            }
        }

        let mut kept = Vec::new();
        for error in &failed {
            if let Some(previous) = self.loaded.get(&error.plugin) {
                let index = sources.iter().position(|s| s.name == error.plugin);
                if let Some(index) = index {
                    chosen[index] = Some(previous.plugin.clone());
                    kept.push(error.plugin.clone());
                }
            }
        }

        let served: HashSet<&str> = sources.iter().map(|s| s.name.as_str()).collect();
        let mut removed: Vec<String> = self
            .loaded
            .keys()
            .filter(|name| !served.contains(name.as_str()))
            .cloned()
            .collect();
        removed.sort();

        // Every tool name stays with the plugin that served it; a plugin that would take one
        // is refused whole (and its earlier version is not kept: it may be the clash).
        let served_names: HashMap<String, String> = self
            .loaded
            .iter()
            .flat_map(|(name, loaded)| {
                loaded
                    .plugin
                    .tools
                    .iter()
                    .map(move |tool| (tool.name.clone(), name.clone()))
            })
            .collect();
        let (registry, refused) = Registry::from_plugins(
            &self.engine,
            chosen.iter().flatten().cloned(),
            &served_names,
        );
        for refusal in &refused {
            compiled.retain(|name| *name != refusal.plugin);
            unchanged.retain(|name| *name != refusal.plugin);
            kept.retain(|name| *name != refusal.plugin);
        }
        failed.extend(refused);

        // A reload that would serve nothing at all, where something is served, is a mistake
        // (a config emptied by accident, every plugin broken): what is served stays.
        if registry.plugins().is_empty() && !self.loaded.is_empty() {
            let reasons: Vec<String> = failed
                .iter()
                .map(|f| format!("; plugin \"{}\": {:#}", f.plugin, f.error))
                .collect();
            bail!(
                "it would serve no plugin, so the {} served stay as they were{}",
                self.loaded.len(),
                reasons.concat()
            );
        }

        // From now on, remember exactly what is served: a removed plugin is freed once its last
        // call in flight ends.
        let mut loaded = HashMap::new();
        for plugin in registry.plugins() {
            let name = plugin.name.to_string();
            let origin = match origins.remove(&name) {
                Some(origin) => origin,
                None => self.loaded.remove(&name).expect("reused or kept").origin,
            };
            loaded.insert(
                name,
                Loaded {
                    origin,
                    plugin: plugin.clone(),
                },
            );
        }
        self.loaded = loaded;

        Ok(Outcome {
            registry,
            compiled,
            unchanged,
            failed,
            kept,
            removed,
        })
    }
}

impl Outcome {
    /// One line per plugin (loaded, reused, kept or not loaded, and why), then what the load
    /// amounted to.
    pub fn log(&self) {
        let mut from_cache = 0;
        for plugin in self.registry.plugins() {
            let name = &*plugin.name;
            let how = if self.compiled.iter().any(|c| c == name) {
                if plugin.from_cache() {
                    from_cache += 1;
                    "from the cache"
                } else {
                    "compiled"
                }
            } else if self.unchanged.iter().any(|u| u == name) {
                "unchanged"
            } else {
                continue; // kept: its failure says so below
            };
            tracing::info!(
                plugin = name,
                "loaded, {} tools ({how})",
                plugin.tools.len()
            );
        }
        for error in &self.failed {
            if self.kept.contains(&error.plugin) {
                tracing::error!(
                    plugin = error.plugin,
                    "not reloaded, still serving the version loaded before: {:#}",
                    error.error
                );
            } else {
                tracing::error!(plugin = error.plugin, "not loaded: {:#}", error.error);
            }
        }
        tracing::info!(
            plugins = self.registry.plugins().len(),
            tools = self.registry.tools().count(),
            compiled = self.compiled.len().saturating_sub(from_cache),
            from_cache,
            unchanged = self.unchanged.len(),
            removed = self.removed.len(),
            failed = self.failed.len(),
            kept = self.kept.len(),
            "plugins loaded"
        );
    }
}

/// The component file of every local plugin in `sources`, and the signature file beside it,
/// as grants name paths.
fn plugin_files(sources: &[PluginSource]) -> Vec<PathBuf> {
    sources
        .iter()
        .filter_map(|source| match &source.source {
            Source::File(path) => Some(path),
            _ => None,
        })
        .flat_map(|path| {
            [
                canonical(path),
                canonical(&crate::supply::signing::signature_path(path)),
            ]
        })
        .collect()
}

/// `path` made absolute with its symlinks resolved, as file grants are; for a file that does not
/// exist yet (a lock file, an audit log), its folder's canonical path and its name.
/// Why `source` may not load if one of its granted directories is reached through a symlink
/// that lies in a folder some plugin may write (`writable`): that plugin could have put it
/// there to point the grant at a directory of its choosing, for this load or a later one.
fn redirection(source: &PluginSource, writable: &[&Path]) -> Option<anyhow::Error> {
    source.grants.files.iter().find_map(|grant| {
        let mut prefix = PathBuf::new();
        for part in grant.requested.components() {
            prefix.push(part);
            if !std::fs::symlink_metadata(&prefix).is_ok_and(|m| m.is_symlink()) {
                continue;
            }
            let Some(folder) = prefix.parent().map(canonical) else {
                continue;
            };
            if let Some(granted) = writable.iter().find(|w| folder.starts_with(w)) {
                return Some(anyhow::anyhow!(
                    "plugin \"{}\" is not loaded: its grant of {} passes through the symlink \
                     {}, which lies in {}, a folder granted writable to a plugin (which could \
                     have made the link); grant the directory by a path without it",
                    source.name,
                    grant.requested.display(),
                    prefix.display(),
                    granted.display()
                ));
            }
        }
        None
    })
}

fn canonical(path: &Path) -> PathBuf {
    if let Ok(path) = path.canonicalize() {
        return path;
    }
    match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) => canonical(if parent.as_os_str().is_empty() {
            Path::new(".")
        } else {
            parent
        })
        .join(name),
        _ => path.to_path_buf(),
    }
}
