//! `moat.lock`: the exact component each plugin of a `moat.toml` was accepted with.
//!
//! It lies beside the configuration (`moat.toml` → `moat.lock`), is written by `moat lock` and
//! is meant to be committed with it:
//!
//! ```toml
//! version = 1
//!
//! [plugins.notes]
//! source = "oci://ghcr.io/acme/notes:1.2"  # as in moat.toml; paths relative to this file
//! digest = "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
//! imports = ["wasi:cli/environment@0.2.6", "wasi:filesystem/types@0.2.6"]
//! tools = ["notes_add", "notes_list"]
//! requests = ["files /notes rw", "network https://api.example.org"]
//! ```
//!
//! While the file exists, `moat serve --config moat.toml` loads a plugin only if its source is
//! the locked one and gives the locked digest: a changed file, a changed download or a tag that
//! moved is refused before it is compiled. `imports`, `tools` and `requests` (its permission
//! manifest) are what the plugin imported, offered and asked for when it was accepted, so
//! `moat lock` can show what a new version changes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use crate::supply::PluginSource;
use crate::supply::source::{Digest, Fetched, Source};

/// The lock file format this moat reads and writes.
pub const VERSION: u32 = 1;

/// A lock file.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lock {
    pub version: u32,
    #[serde(default)]
    pub plugins: BTreeMap<String, Entry>,
}

/// What was accepted for one plugin.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// The source as moat.toml names it (paths relative to the lock file's folder).
    pub source: String,
    /// The sha256 of the component.
    pub digest: Digest,
    /// The interfaces the component imports.
    #[serde(default)]
    pub imports: Vec<String>,
    /// Its tools' MCP names.
    #[serde(default)]
    pub tools: Vec<String>,
    /// What its permission manifest asks for, one request a line (none without a manifest).
    #[serde(default)]
    pub requests: Vec<String>,
}

impl Lock {
    /// The lock file of a configuration file: the same name with the extension `.lock`.
    pub fn path_for(config: &Path) -> PathBuf {
        config.with_extension("lock")
    }

    /// Reads a lock file; `None` when there is none.
    pub fn read(path: &Path) -> Result<Option<Self>> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        let lock: Self = toml::from_str(&text).with_context(|| format!("in {}", path.display()))?;
        if lock.version != VERSION {
            bail!(
                "{} has version {}; this moat reads version {VERSION}",
                path.display(),
                lock.version
            );
        }
        Ok(Some(lock))
    }

    /// Writes the lock file, whole or not at all.
    pub fn write(&self, path: &Path) -> Result<()> {
        let text = format!(
            "# Written by `moat lock`: the component each plugin of {} was accepted with.\n\
             # moat serve refuses a plugin whose source now gives another. Commit this file.\n\n{}",
            path.with_extension("toml")
                .file_name()
                .unwrap_or_default()
                .to_string_lossy(),
            toml::to_string(self)?
        );
        let temp = path.with_extension(format!("lock.tmp{}", std::process::id()));
        std::fs::write(&temp, text).with_context(|| format!("writing {}", temp.display()))?;
        std::fs::rename(&temp, path).with_context(|| format!("writing {}", path.display()))
    }

    /// Whether plugin `name`, from `source` (resolved against `base`, the lock file's folder),
    /// may load with the component `digest`.
    pub fn check(&self, name: &str, source: &Source, base: &Path, digest: &Digest) -> Result<()> {
        let Some(entry) = self.plugins.get(name) else {
            bail!("plugin \"{name}\" is not in moat.lock; run `moat lock` to pin it");
        };
        let locked_source = Source::parse(&entry.source, base)?;
        if locked_source != *source {
            bail!(
                "plugin \"{name}\": moat.toml names {source}, moat.lock pins {}; run `moat lock` \
                 to accept",
                entry.source
            );
        }
        if entry.digest != *digest {
            let moved = match source {
                Source::Oci(oci) if !oci.is_digest() => " (the tag moved)",
                _ => "",
            };
            bail!(
                "plugin \"{name}\": {source} now has {digest}{moved}, moat.lock pins {}; run \
                 `moat lock` to accept",
                entry.digest
            );
        }
        Ok(())
    }
}

impl Lock {
    /// Refuses, in place, every fetched component the lock does not pin for its plugin (see
    /// [`Lock::check`]), so that it is reported as not loaded and never compiled. `base` is the
    /// lock file's folder.
    pub fn enforce(&self, base: &Path, sources: &[PluginSource], fetched: &mut [Result<Fetched>]) {
        for (source, result) in sources.iter().zip(fetched) {
            if let Ok(got) = result
                && let Err(error) = self.check(&source.name, &source.source, base, &got.digest)
            {
                *result = Err(error);
            }
        }
    }

    /// What changes from `self` to `new`, plugin by plugin, for the operator to review.
    pub fn report(&self, new: &Lock) -> Vec<String> {
        let mut report = Vec::new();
        for (name, entry) in &new.plugins {
            match self.plugins.get(name) {
                None => report.push(format!(
                    "added    {name}: {} {}",
                    entry.source, entry.digest
                )),
                Some(before) => {
                    let changes = changes(before, entry);
                    if changes.is_empty() {
                        report.push(format!("same     {name}: {}", entry.digest));
                    } else {
                        report.push(format!("changed  {name}:"));
                        report.extend(changes.iter().map(|line| format!("  {line}")));
                    }
                }
            }
        }
        for (name, entry) in &self.plugins {
            if !new.plugins.contains_key(name) {
                report.push(format!(
                    "removed  {name}: {} {}",
                    entry.source, entry.digest
                ));
            }
        }
        report
    }
}

/// How an entry names `source`: as moat.toml does, a path relative to `base` (the lock file's
/// folder) when it lies beneath it.
pub fn source_text(source: &Source, base: &Path) -> String {
    match source {
        Source::File(path) | Source::Dir(path) => path
            .strip_prefix(base)
            .unwrap_or(path)
            .display()
            .to_string(),
        other => other.to_string(),
    }
}

/// What changes from `old` to `new`, one line each, for the operator to review before accepting
/// it; empty when nothing does.
pub fn changes(old: &Entry, new: &Entry) -> Vec<String> {
    let mut lines = Vec::new();
    if old.source != new.source {
        lines.push(format!("source   {} → {}", old.source, new.source));
    }
    if old.digest != new.digest {
        lines.push(format!("digest   {} → {}", old.digest, new.digest));
    }
    lines.extend(list_change("imports", &old.imports, &new.imports));
    lines.extend(list_change("tools", &old.tools, &new.tools));
    lines.extend(list_change("requests", &old.requests, &new.requests));
    lines
}

/// `name  + added, - removed` for two lists, or nothing when they hold the same items.
fn list_change(name: &str, old: &[String], new: &[String]) -> Option<String> {
    let added: Vec<String> = new
        .iter()
        .filter(|item| !old.contains(item))
        .map(|item| format!("+ {item}"))
        .collect();
    let removed: Vec<String> = old
        .iter()
        .filter(|item| !new.contains(item))
        .map(|item| format!("- {item}"))
        .collect();
    if added.is_empty() && removed.is_empty() {
        return None;
    }
    Some(format!(
        "{name:<8} {}",
        [added, removed].concat().join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(digest: &[u8], tools: &[&str]) -> Entry {
        Entry {
            source: "oci://127.0.0.1:5000/notes:1".into(),
            digest: Digest::of(digest),
            imports: vec!["wasi:cli/environment@0.2.0".into()],
            tools: tools.iter().map(|t| t.to_string()).collect(),
            requests: vec!["files /notes rw".into()],
        }
    }

    #[test]
    fn round_trips_and_checks() {
        let dir = std::env::temp_dir().join(format!("moat-lock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("moat.lock");
        let mut lock = Lock {
            version: VERSION,
            plugins: BTreeMap::new(),
        };
        lock.plugins
            .insert("notes".into(), entry(b"v1", &["notes_add"]));
        lock.write(&path).unwrap();
        let read = Lock::read(&path).unwrap().unwrap();
        assert_eq!(read.plugins["notes"], lock.plugins["notes"]);

        let source = Source::parse("oci://127.0.0.1:5000/notes:1", &dir).unwrap();
        read.check("notes", &source, &dir, &Digest::of(b"v1"))
            .unwrap();
        let moved = read
            .check("notes", &source, &dir, &Digest::of(b"v2"))
            .unwrap_err()
            .to_string();
        assert!(
            moved.contains(&format!(
                "oci://127.0.0.1:5000/notes:1 now has {} (the tag moved), moat.lock pins {}",
                Digest::of(b"v2"),
                Digest::of(b"v1")
            )),
            "{moved}"
        );
        let other = Source::parse("oci://127.0.0.1:5000/notes:2", &dir).unwrap();
        let error = read.check("notes", &other, &dir, &Digest::of(b"v1"));
        assert!(
            error
                .unwrap_err()
                .to_string()
                .contains("moat.lock pins oci://")
        );
        let error = read.check("other", &source, &dir, &Digest::of(b"v1"));
        assert!(error.unwrap_err().to_string().contains("not in moat.lock"));

        std::fs::write(&path, "version = 2\n").unwrap();
        assert!(Lock::read(&path).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn shows_what_changed() {
        let old = entry(b"v1", &["notes_add", "notes_list"]);
        assert!(changes(&old, &old).is_empty());
        let mut new = entry(b"v2", &["notes_add", "notes_delete"]);
        new.imports.push("wasi:filesystem/types@0.2.0".into());
        new.requests = vec![
            "files /notes ro".into(),
            "network https://evil.example".into(),
        ];
        let lines = changes(&old, &new);
        assert_eq!(lines.len(), 4, "{lines:?}");
        assert!(lines[0].starts_with("digest   sha256:"), "{lines:?}");
        assert_eq!(lines[1], "imports  + wasi:filesystem/types@0.2.0");
        assert_eq!(lines[2], "tools    + notes_delete, - notes_list");
        assert_eq!(
            lines[3],
            "requests + files /notes ro, + network https://evil.example, - files /notes rw"
        );
    }
}
