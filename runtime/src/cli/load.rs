//! Loading one plugin or a config's plugins for the commands that inspect, call or check them.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result, bail};

use moat::plugin::Plugin;
use moat::plugin::registry::{LoadError, Registry};
use moat::plugin::tiers::Tiers;
use moat::serve::config;
use moat::supply::PluginSource;
use moat::supply::cache::Cache;
use moat::supply::lock::Lock;
use moat::supply::policy::Policy;
use moat::supply::source::{Fetched, Fetcher, Progress, Source};

use super::serve::open_cache;

/// The plugin of `config` named `plugin`, or whose file `plugin` is. It sets this process's
/// engine limits to the config's `[engine]` too, so that the plugin is loaded as `moat serve`
/// would load it.
pub fn configured_source(config: &Path, plugin: &str) -> Result<PluginSource> {
    moat::sandbox::engine::set_pool_limits(config::read_engine(config)?)?;
    let wanted = Path::new(plugin).canonicalize().ok();
    config::read(config)?
        .into_iter()
        .find(|s| {
            let file = match &s.source {
                Source::File(path) => path.canonicalize().ok(),
                _ => None,
            };
            plugin == s.name || (wanted.is_some() && file == wanted)
        })
        .with_context(|| format!("{} has no plugin {plugin}", config.display()))
}

/// Compiles the fetched plugins under `policy` (from the compiled-plugin `cache` when it has
/// them, else with Winch if `tiers` are given), with a spinner on a terminal.
pub fn load(
    engine: &wasmtime::Engine,
    sources: &[PluginSource],
    fetched: Vec<Result<Fetched>>,
    cache: Option<&Cache>,
    tiers: Option<&Tiers>,
    progress: &Progress,
    policy: &Policy,
) -> Result<(Registry, Vec<LoadError>)> {
    let spinner = progress.spinner(&match sources.len() {
        1 => format!("compiling {}", sources[0].name),
        n => format!("compiling {n} plugins"),
    });
    let loaded = Registry::load_fetched(engine, sources, fetched, cache, tiers, policy);
    spinner.finish_and_clear();
    loaded
}

/// Loads the one plugin a source string names, for `inspect` and `call`, with where it came from.
pub async fn load_one(text: &str, policy: &Policy) -> Result<(Arc<Plugin>, String)> {
    load_source(one_source(text)?, policy).await
}

/// The one plugin a source string names.
pub fn one_source(text: &str) -> Result<PluginSource> {
    let mut sources = config::sources_from_args(&[text.to_string()])?;
    if sources.len() != 1 {
        bail!("{text} holds {} plugins; name one", sources.len());
    }
    Ok(sources.pop().expect("one source"))
}

/// Fetches and loads one plugin under `policy`, with the grants of `source`.
pub async fn load_source(source: PluginSource, policy: &Policy) -> Result<(Arc<Plugin>, String)> {
    let fetcher = Fetcher::from_env();
    let fetched = fetcher.fetch(&source.source).await?;
    load_fetched(source, fetched, &fetcher, policy)
}

/// The plugin of `config` named `plugin` (or whose file it is), loaded as `moat serve --config`
/// loads it: with its grants, and only if the lock beside the config, when there is one, pins
/// what its source gives now.
pub async fn load_configured(
    config: &Path,
    plugin: &str,
    policy: &Policy,
) -> Result<(Arc<Plugin>, String)> {
    let source = configured_source(config, plugin)?;
    let fetcher = Fetcher::from_env();
    let mut fetched = vec![fetcher.fetch(&source.source).await];
    if let Some(lock) = Lock::read(&Lock::path_for(config))? {
        let base = config.parent().unwrap_or(Path::new(""));
        lock.enforce(base, std::slice::from_ref(&source), &mut fetched);
    }
    let fetched = fetched.pop().expect("one fetch")?;
    load_fetched(source, fetched, &fetcher, policy)
}

fn load_fetched(
    source: PluginSource,
    fetched: Fetched,
    fetcher: &Fetcher,
    policy: &Policy,
) -> Result<(Arc<Plugin>, String)> {
    let origin = fetched.origin.clone();
    let engine = moat::sandbox::engine::new_engine_with_fuel(source.limits.fuel.is_some())?;
    // One call or a look at the types: Winch's code, unless Cranelift's is in the cache.
    let cache = open_cache();
    let tiers = Tiers::baseline_only(&engine, cache.clone())?;
    let (registry, mut errors) = load(
        &engine,
        &[source],
        vec![Ok(fetched)],
        cache.as_ref(),
        Some(&tiers),
        fetcher.progress(),
        policy,
    )?;
    if let Some(error) = errors.pop() {
        return Err(error.error);
    }
    Ok((registry.plugins()[0].clone(), origin))
}
