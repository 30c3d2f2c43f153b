//! The operator's configuration file, `moat.toml`: which plugins to serve and with what limits.
//!
//! ```toml
//! [plugins.notes]
//! path = "plugins/notes.wasm"  # relative to this file; or instead a source of any kind:
//! # source = "oci://ghcr.io/acme/notes:1.2"   (or "https://…/notes.wasm", or a path)
//! deadline_ms = 5000           # optional limits; see `Limits` for the defaults
//! max_memory_mb = 64
//! max_output_kb = 64
//! max_result_kb = 4096
//! max_concurrent_calls = 4
//! max_queued_calls = 16
//! files = [{ host = "./notes", guest = "/notes", mode = "rw" }]  # nothing unless listed
//! env = { NOTES_TITLE = "Mine", TOKEN = "${env:NOTES_TOKEN}" }   # from moat's environment
//! ```
//!
//! Unknown keys are errors, so a typo never silently drops a setting; every string becomes a
//! checked type here, and the rest of moat never sees the raw file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde::Deserialize;

use crate::grants::{FileGrant, Grants};
use crate::plugin::{Limits, sanitize};
use crate::registry::PluginSource;
use crate::source::Source;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    #[serde(default)]
    plugins: BTreeMap<String, PluginEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PluginEntry {
    path: Option<PathBuf>,
    source: Option<String>,
    deadline_ms: Option<u64>,
    max_memory_mb: Option<usize>,
    max_output_kb: Option<usize>,
    max_result_kb: Option<usize>,
    max_concurrent_calls: Option<usize>,
    max_queued_calls: Option<usize>,
    #[serde(default)]
    files: Vec<FileEntry>,
    #[serde(default)]
    env: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileEntry {
    host: PathBuf,
    guest: String,
    mode: FileMode,
}

#[derive(Debug, Deserialize)]
enum FileMode {
    #[serde(rename = "ro")]
    ReadOnly,
    #[serde(rename = "rw")]
    ReadWrite,
}

/// Reads `moat.toml` into plugin sources, paths resolved against the file's folder.
pub fn read(path: &Path) -> Result<Vec<PluginSource>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    parse(&text, path.parent().unwrap_or(Path::new(".")), &|name| {
        std::env::var(name).ok()
    })
    .with_context(|| format!("in {}", path.display()))
}

/// Parses a config file's text; `env` looks up moat's own environment for `${env:NAME}`.
fn parse(
    text: &str,
    base: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<PluginSource>> {
    let file: ConfigFile = toml::from_str(text)?;
    file.plugins
        .into_iter()
        .map(|(name, entry)| {
            if name.is_empty() || sanitize(&name) != name {
                bail!("plugin name \"{name}\" may hold only ASCII letters, digits and `_`");
            }
            let grants = grants(&entry, base, env)
                .with_context(|| format!("in the grants of plugin \"{name}\""))?;
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
                max_result_bytes: entry
                    .max_result_kb
                    .map_or(defaults.max_result_bytes, |kb| kb << 10),
                max_concurrent_calls: entry
                    .max_concurrent_calls
                    .unwrap_or(defaults.max_concurrent_calls),
                max_queued_calls: entry.max_queued_calls.unwrap_or(defaults.max_queued_calls),
            };
            if limits.max_concurrent_calls == 0 {
                bail!("plugin \"{name}\": max_concurrent_calls must be at least 1");
            }
            let source =
                plugin_source(&entry, base).with_context(|| format!("plugin \"{name}\""))?;
            Ok(PluginSource {
                name,
                source,
                limits,
                grants,
            })
        })
        .collect()
}

/// The one component a plugin entry names, by `path` or by `source`.
fn plugin_source(entry: &PluginEntry, base: &Path) -> Result<Source> {
    let source = match (&entry.path, &entry.source) {
        (Some(path), None) => Source::File(base.join(path)),
        (None, Some(text)) => Source::parse(text, base)?,
        (Some(_), Some(_)) => bail!("give `path` or `source`, not both"),
        (None, None) => bail!("`source` (or `path`) is missing"),
    };
    if let Source::Dir(dir) = &source {
        bail!("{} is a folder; name one component", dir.display());
    }
    Ok(source)
}

fn grants(
    entry: &PluginEntry,
    base: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Grants> {
    let mut files = Vec::new();
    for file in &entry.files {
        let host = base.join(&file.host);
        let host = host
            .canonicalize()
            .with_context(|| format!("granted directory {}", host.display()))?;
        if !host.is_dir() {
            bail!("granted path {} is not a directory", host.display());
        }
        if !file.guest.starts_with('/') || file.guest.split('/').any(|part| part == "..") {
            bail!(
                "guest path \"{}\" must be absolute and free of `..`",
                file.guest
            );
        }
        files.push(FileGrant {
            host,
            guest: file.guest.clone(),
            writable: matches!(file.mode, FileMode::ReadWrite),
        });
    }
    let mut vars = Vec::new();
    for (name, value) in &entry.env {
        let value = match value
            .strip_prefix("${env:")
            .and_then(|v| v.strip_suffix('}'))
        {
            Some(from) => env(from).with_context(|| {
                format!("env {name} = \"{value}\": moat's environment has no {from}")
            })?,
            None => value.clone(),
        };
        vars.push((name.clone(), value));
    }
    Ok(Grants { files, env: vars })
}

/// Plugins named on the command line: files, folders (every `.wasm` file in them), URLs and OCI
/// references, each named after its file or repository (`text-tools.wasm` → `text_tools`).
pub fn sources_from_args(args: &[String]) -> Result<Vec<PluginSource>> {
    let mut sources = Vec::new();
    for arg in args {
        let source = Source::parse(arg, Path::new(""))?;
        for (name, source) in source.expand()? {
            sources.push(PluginSource {
                name,
                source,
                limits: Limits::default(),
                grants: Grants::default(),
            });
        }
    }
    Ok(sources)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_plugins_with_limits() {
        let sources = parse(
            "[plugins.echo]\npath = \"echo.wasm\"\ndeadline_ms = 100\n",
            Path::new("/etc/moat"),
            &no_env,
        )
        .unwrap();
        assert_eq!(sources.len(), 1);
        assert_eq!(
            sources[0].source,
            Source::File("/etc/moat/echo.wasm".into())
        );
        assert_eq!(sources[0].limits.deadline, Duration::from_millis(100));
    }

    #[test]
    fn unknown_keys_are_errors() {
        let error = parse(
            "[plugins.echo]\npath = \"e.wasm\"\ndeadline = 1\n",
            Path::new("."),
            &no_env,
        )
        .unwrap_err();
        assert!(
            format!("{error:#}").contains("unknown field `deadline`"),
            "{error:#}"
        );
    }

    #[test]
    fn plugin_names_are_checked() {
        let error = parse(
            "[plugins.\"a.b\"]\npath = \"e.wasm\"\n",
            Path::new("."),
            &no_env,
        )
        .unwrap_err();
        assert!(error.to_string().contains("may hold only"), "{error}");
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn a_plugin_has_a_path_or_a_source() {
        let sources = parse(
            "[plugins.a]\nsource = \"oci://127.0.0.1:5000/a:1\"\n\
             [plugins.b]\nsource = \"https://example.com/b.wasm\"\n\
             [plugins.c]\nsource = \"c.wasm\"\n",
            Path::new("/etc/moat"),
            &no_env,
        )
        .unwrap();
        let shown: Vec<String> = sources.iter().map(|s| s.source.to_string()).collect();
        assert_eq!(
            shown,
            [
                "oci://127.0.0.1:5000/a:1",
                "https://example.com/b.wasm",
                "/etc/moat/c.wasm"
            ]
        );
        for (entry, expected) in [
            ("path = \"a.wasm\"\nsource = \"a.wasm\"", "not both"),
            ("deadline_ms = 1", "`source` (or `path`) is missing"),
            ("source = \"http://example.com/a.wasm\"", "plain http"),
            ("source = \".\"", "is a folder"),
        ] {
            let text = format!("[plugins.a]\n{entry}\n");
            let error = parse(&text, Path::new("."), &no_env).unwrap_err();
            assert!(
                format!("{error:#}").contains(expected),
                "{entry}: {error:#}"
            );
        }
    }

    #[test]
    fn grants_are_resolved_and_checked() {
        let dir = std::env::temp_dir().join(format!("moat-config-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("data")).unwrap();
        let env = |name: &str| (name == "HOST_TOKEN").then(|| "s3cret".to_string());
        let sources = parse(
            r#"[plugins.notes]
path = "n.wasm"
files = [{ host = "data", guest = "/data", mode = "ro" }]
env = { TOKEN = "${env:HOST_TOKEN}", PLAIN = "x" }
"#,
            &dir,
            &env,
        )
        .unwrap();
        let grants = &sources[0].grants;
        assert_eq!(
            grants.files[0].host,
            dir.join("data").canonicalize().unwrap()
        );
        assert_eq!(grants.files[0].guest, "/data");
        assert!(!grants.files[0].writable);
        assert_eq!(
            grants.env,
            [
                ("PLAIN".into(), "x".into()),
                ("TOKEN".into(), "s3cret".into())
            ]
        );

        for (bad, expected) in [
            (
                r#"files = [{ host = "missing", guest = "/d", mode = "ro" }]"#,
                "granted directory",
            ),
            (
                r#"files = [{ host = "data", guest = "d", mode = "ro" }]"#,
                "must be absolute",
            ),
            (
                r#"files = [{ host = "data", guest = "/d", mode = "rwx" }]"#,
                "unknown variant",
            ),
            (
                r#"env = { T = "${env:NOPE}" }"#,
                "moat's environment has no NOPE",
            ),
        ] {
            let text = format!("[plugins.notes]\npath = \"n.wasm\"\n{bad}\n");
            let error = parse(&text, &dir, &env).unwrap_err();
            assert!(format!("{error:#}").contains(expected), "{bad}: {error:#}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
