//! Watching what is served: `moat serve` watches its `moat.toml` and the plugin files and folders it
//! was given, and reloads (see [`crate::serve::reload`]) when one of them changes, or on SIGHUP:
//! the plugins, and the service tables ([`crate::serve::tables`]).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use notify_debouncer_full::notify::{RecommendedWatcher, RecursiveMode};
use notify_debouncer_full::{DebounceEventResult, Debouncer, RecommendedCache, new_debouncer};
use tokio::sync::mpsc;

use crate::mcp::catalogue::Catalogue;
use crate::policy::Policies;
use crate::serve::config::Config;
use crate::serve::reload::{Loader, Served};
use crate::serve::reloads::{Current, Reloads};
use crate::serve::tables::Tables;
use crate::supply::PluginSource;
use crate::supply::source::Source;

/// How long the files must stay quiet before a reload: a plugin being written in several steps
/// is read once it is whole.
const DEBOUNCE: Duration = Duration::from_millis(250);

/// Reloads what `served` names whenever it changes on disk or moat gets SIGHUP, and swaps the
/// result into `catalogue`, with the service tables applied through `tables`. `sources` are the
/// ones `loader` loaded last. Runs until the process ends; when files cannot be watched, only
/// SIGHUP reloads.
pub fn spawn(
    served: Served,
    loader: Loader,
    mut tables: Tables,
    catalogue: Catalogue,
    sources: &[PluginSource],
    reloads: Reloads,
) -> Result<()> {
    let mut asked = reloads.asked();
    let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .context("listening for SIGHUP")?;
    let (changes, mut changed) = mpsc::unbounded_channel::<Vec<PathBuf>>();
    let mut watcher = match new_debouncer(DEBOUNCE, None, move |result: DebounceEventResult| {
        match result {
            Ok(events) => {
                // Only changes count: moat opening and reading the files is reported too.
                let paths = events
                    .into_iter()
                    .filter(|e| !e.event.kind.is_access())
                    .flat_map(|e| e.event.paths);
                let _ = changes.send(paths.collect());
            }
            Err(errors) => {
                for error in errors {
                    tracing::warn!("watching the plugins: {error}");
                }
            }
        }
    }) {
        Ok(debouncer) => Some(debouncer),
        Err(error) => {
            tracing::warn!("not watching the plugin files ({error}); send SIGHUP to reload");
            None
        }
    };
    let mut watched = Watched::default();
    if let Some(watcher) = watcher.as_mut() {
        watched.update(watcher, &served, sources, &catalogue);
    }
    let loader = Arc::new(Mutex::new(loader));
    tokio::spawn(async move {
        loop {
            let reason = tokio::select! {
                Some(paths) = changed.recv() => {
                    let Some(path) = paths.iter().find(|p| watched.matters(p)) else {
                        continue;
                    };
                    format!("{} changed", path.display())
                }
                Some(()) = hangup.recv() => "SIGHUP".to_string(),
                Some(()) = asked.recv() => "an operator asked".to_string(),
                else => break,
            };
            // Whatever else changed meanwhile is read by this same reload.
            while changed.try_recv().is_ok() {}
            tracing::info!("reloading: {reason}");
            let reloaded = reload(&served, &loader, &mut tables, &catalogue, &reloads).await;
            catalogue.metrics().record_reload(reloaded.is_ok());
            reloads.record(&reason, reloaded.as_ref().err().map(|e| format!("{e:#}")));
            match reloaded {
                Ok(sources) => {
                    if let Some(watcher) = watcher.as_mut() {
                        watched.update(watcher, &served, &sources, &catalogue);
                    }
                }
                Err(error) => {
                    tracing::error!(
                        "reload failed, still serving the tools as they were: {error:#}"
                    )
                }
            }
        }
    });
    Ok(())
}

/// One reload; returns the sources it read. Whatever fails before the swap changes nothing.
async fn reload(
    served: &Served,
    loader: &Arc<Mutex<Loader>>,
    tables: &mut Tables,
    catalogue: &Catalogue,
    reloads: &Reloads,
) -> Result<Vec<PluginSource>> {
    let config = served.read()?;
    let (text, console) = (config.text.clone(), config.console.clone());
    let sources = reload_from(config, served, loader, tables, catalogue).await?;
    reloads.serving(Current {
        path: served.config.clone(),
        text,
        console,
        sources: source_texts(&sources),
    });
    Ok(sources)
}

/// The reload of `config`, the one reading of the file this reload makes: every table and
/// plugin comes from it, so an edit that lands meanwhile waits for the next reload.
async fn reload_from(
    config: Config,
    served: &Served,
    loader: &Arc<Mutex<Loader>>,
    tables: &mut Tables,
    catalogue: &Catalogue,
) -> Result<Vec<PluginSource>> {
    let Config {
        service,
        audit,
        plugins,
        engine,
        policy,
        ..
    } = config;
    // Everything is checked and built before anything is swapped: a reload that fails
    // anywhere changes nothing.
    let prepared = tables.prepare(service, audit, catalogue)?;
    let policy = policy.settings(tables.enterprise())?;
    let (sources, fetched) = served.fetch(plugins).await?;
    if let Some(config) = &served.config {
        // The pool is made once, when moat starts: a new [engine] waits for a restart.
        let running = crate::sandbox::engine::pool_limits();
        if engine != running {
            tracing::warn!(
                "{}: [engine] changed; it takes effect when moat restarts, and until then \
                 plugins load with the limits moat started with ({running})",
                config.display()
            );
        }
    }
    let loader = loader.clone();
    let (sources, outcome) = tokio::task::spawn_blocking(move || {
        let outcome = loader
            .lock()
            .expect("loader lock")
            .load_fetched(&sources, fetched);
        (sources, outcome)
    })
    .await
    .context("the reload task failed")?;
    let outcome = outcome?;
    // The policies are checked against the tools they will decide over.
    let policies = Policies::load(&policy, &outcome.registry, &source_texts(&sources))?;
    outcome.log();
    // The new rules first, then the plugins they are for: no new tool is served under the old.
    tables.apply(prepared, catalogue);
    catalogue.set_policies(policies);
    if catalogue.replace(Arc::new(outcome.registry)) {
        tracing::info!("the tool list changed; clients were told");
    }
    Ok(sources)
}

/// Where each plugin came from, by name, as the policies' `Plugin` entities tell it.
pub fn source_texts(sources: &[PluginSource]) -> HashMap<String, String> {
    sources
        .iter()
        .map(|s| (s.name.clone(), s.source.to_string()))
        .collect()
}

/// The folders being watched, and which paths in them matter.
#[derive(Default)]
struct Watched {
    /// The folders watched now.
    folders: BTreeSet<PathBuf>,
    /// Files whose change matters: the config file and every plugin file a source names.
    files: HashSet<PathBuf>,
    /// Folders given on the command line: any `.wasm` file appearing, changing or leaving matters.
    plugin_folders: HashSet<PathBuf>,
}

impl Watched {
    fn update(
        &mut self,
        watcher: &mut Debouncer<RecommendedWatcher, RecommendedCache>,
        served: &Served,
        sources: &[PluginSource],
        catalogue: &Catalogue,
    ) {
        // A plugin file and its signature beside it.
        let mut files: HashSet<PathBuf> = sources
            .iter()
            .filter_map(|s| match &s.source {
                Source::File(path) => Some(absolute(path)),
                _ => None,
            })
            .flat_map(|path| [crate::supply::signing::signature_path(&path), path])
            .collect();
        files.extend(served.config.as_deref().map(absolute));
        // The policy files in force: an edit of one reloads them.
        let policies = catalogue.policies().settings().files;
        files.extend(policies.iter().map(|file| absolute(&file.path)));
        let plugin_folders: HashSet<PathBuf> = served
            .paths
            .iter()
            .filter(|p| p.is_dir())
            .map(|p| absolute(p))
            .collect();
        // Watch folders rather than files: editors and build tools replace a file by renaming
        // another onto it, which a watch on the file itself would not follow.
        let wanted: BTreeSet<PathBuf> = files
            .iter()
            .filter_map(|file| file.parent().map(Path::to_path_buf))
            .chain(plugin_folders.iter().cloned())
            .collect();
        for gone in self.folders.difference(&wanted) {
            let _ = watcher.unwatch(gone);
        }
        let mut folders: BTreeSet<PathBuf> = self.folders.intersection(&wanted).cloned().collect();
        for folder in wanted.difference(&self.folders) {
            match watcher.watch(folder, RecursiveMode::NonRecursive) {
                Ok(()) => {
                    folders.insert(folder.clone());
                }
                // Tried again at the next reload.
                Err(error) => tracing::warn!("cannot watch {}: {error}", folder.display()),
            }
        }
        *self = Self {
            folders,
            files,
            plugin_folders,
        };
    }

    fn matters(&self, path: &Path) -> bool {
        self.files.contains(path)
            || path
                .extension()
                .is_some_and(|e| e == "wasm" || e == "minisig")
                && path
                    .parent()
                    .is_some_and(|folder| self.plugin_folders.contains(folder))
    }
}

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::plugin::registry::Registry;
    use crate::serve::tables::Overridden;
    use crate::supply::policy::Policy;

    /// A reload prepares and swaps from the one reading of moat.toml it starts with: spoiled
    /// after that reading, the file is not read again, so no table of another version can be
    /// paired with this one's plugins.
    #[tokio::test]
    async fn a_reload_reads_moat_toml_once() {
        let dir = std::env::temp_dir().join(format!("moat-reload-once-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("moat.toml");
        std::fs::write(
            &path,
            "[audit]\npath = \"audit.jsonl\"\n[quotas]\nrequests_per_minute = 60\n\
             [engine]\nmax_tables_per_plugin = 3\n",
        )
        .unwrap();
        let served = Served {
            config: Some(path.clone()),
            ..Served::default()
        };
        let config = served.read().unwrap();
        let engine = crate::sandbox::engine::new_engine().unwrap();
        let (registry, _) = Registry::from_plugins(&engine, [], &HashMap::new());
        let catalogue = Catalogue::from(Arc::new(registry));
        let mut tables = Tables::new(
            &config.service,
            config.audit.clone(),
            Overridden::default(),
            None,
            Policy::none(),
        );
        let loader = Arc::new(Mutex::new(Loader::new(engine, None)));
        std::fs::write(&path, "[plugins\n").unwrap();
        assert!(served.read().is_err(), "the file is spoiled");
        let sources = reload_from(config, &served, &loader, &mut tables, &catalogue)
            .await
            .expect("a reload that reads only the one reading it was given");
        assert!(sources.is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
