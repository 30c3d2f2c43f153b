//! The operator's configuration file, `moat.toml`: which plugins to serve and with what limits.
//!
//! ```toml
//! [plugins.echo]
//! path = "plugins/echo.wasm"   # relative to this file
//! deadline_ms = 5000           # optional; see `Limits` for the defaults
//! max_memory_mb = 64
//! max_output_kb = 64
//! ```
//!
//! Unknown keys are errors, so a typo never silently drops a setting.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde::Deserialize;

use crate::plugin::{Limits, sanitize};
use crate::registry::PluginSource;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    #[serde(default)]
    plugins: BTreeMap<String, PluginEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PluginEntry {
    path: PathBuf,
    deadline_ms: Option<u64>,
    max_memory_mb: Option<usize>,
    max_output_kb: Option<usize>,
}

/// Reads `moat.toml` into plugin sources, paths resolved against the file's folder.
pub fn read(path: &Path) -> Result<Vec<PluginSource>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    parse(&text, path.parent().unwrap_or(Path::new(".")))
        .with_context(|| format!("in {}", path.display()))
}

fn parse(text: &str, base: &Path) -> Result<Vec<PluginSource>> {
    let file: ConfigFile = toml::from_str(text)?;
    file.plugins
        .into_iter()
        .map(|(name, entry)| {
            if name.is_empty() || sanitize(&name) != name {
                bail!("plugin name \"{name}\" may hold only ASCII letters, digits and `_`");
            }
            let defaults = Limits::default();
            let limits = Limits {
                deadline: entry
                    .deadline_ms
                    .map_or(defaults.deadline, Duration::from_millis),
                max_memory_bytes: entry
                    .max_memory_mb
                    .map_or(defaults.max_memory_bytes, |mb| mb << 20),
                max_output_bytes: entry
                    .max_output_kb
                    .map_or(defaults.max_output_bytes, |kb| kb << 10),
            };
            Ok(PluginSource {
                name,
                path: base.join(entry.path),
                limits,
            })
        })
        .collect()
}

/// Sources for plugin files and folders named on the command line: a folder stands for every
/// `.wasm` file in it, and a plugin is named after its file (`text-tools.wasm` → `text_tools`).
pub fn sources_from_paths(paths: &[PathBuf]) -> Result<Vec<PluginSource>> {
    let mut sources = Vec::new();
    for path in paths {
        if path.is_dir() {
            let mut files: Vec<PathBuf> = std::fs::read_dir(path)
                .with_context(|| format!("reading {}", path.display()))?
                .filter_map(|entry| entry.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "wasm"))
                .collect();
            files.sort();
            sources.extend(files.into_iter().map(source_for_file));
        } else {
            sources.push(source_for_file(path.clone()));
        }
    }
    Ok(sources)
}

fn source_for_file(path: PathBuf) -> PluginSource {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    PluginSource {
        name: sanitize(&stem),
        path,
        limits: Limits::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_plugins_with_limits() {
        let sources = parse(
            "[plugins.echo]\npath = \"echo.wasm\"\ndeadline_ms = 100\n",
            Path::new("/etc/moat"),
        )
        .unwrap();
        assert_eq!(sources.len(), 1);
        assert_eq!(sources[0].path, Path::new("/etc/moat/echo.wasm"));
        assert_eq!(sources[0].limits.deadline, Duration::from_millis(100));
    }

    #[test]
    fn unknown_keys_are_errors() {
        let error = parse(
            "[plugins.echo]\npath = \"e.wasm\"\ndeadline = 1\n",
            Path::new("."),
        )
        .unwrap_err();
        assert!(
            format!("{error:#}").contains("unknown field `deadline`"),
            "{error:#}"
        );
    }

    #[test]
    fn plugin_names_are_checked() {
        let error = parse("[plugins.\"a.b\"]\npath = \"e.wasm\"\n", Path::new(".")).unwrap_err();
        assert!(error.to_string().contains("may hold only"), "{error}");
    }
}
