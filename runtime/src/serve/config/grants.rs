//! What a plugin is granted: host folders, environment, `wasi:config/store` settings, hosts it
//! may reach and headers added on the way. Nothing unless listed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use schemars::JsonSchema;
use serde::Deserialize;

use super::expand::Lookup;
use super::inject::injection;
use super::plugins::PluginEntry;
use super::schema::GUEST_PATH_PATTERN;
use crate::sandbox::grants::{FileGrant, Grants};
use crate::sandbox::network::{HostPattern, Network, NetworkGrant};

/// A host folder the plugin may see.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct FileEntry {
    /// The folder on the host, relative to moat.toml: `"./notes"`.
    host: PathBuf,
    /// Where the plugin sees it: an absolute path without `..`, `"/notes"`.
    #[schemars(regex(pattern = GUEST_PATH_PATTERN))]
    guest: String,
    /// `"ro"` to read only, `"rw"` to read and write.
    mode: FileMode,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(super) enum FileMode {
    /// Read only.
    #[serde(rename = "ro")]
    ReadOnly,
    /// Read and write.
    #[serde(rename = "rw")]
    ReadWrite,
}

pub(super) fn grants(
    entry: &PluginEntry,
    base: &Path,
    lookup: &Lookup,
    sources: &BTreeMap<String, crate::upstream::Source>,
) -> Result<Grants> {
    let mut files = Vec::new();
    for file in &entry.files {
        if !file.guest.starts_with('/') || file.guest.split('/').any(|part| part == "..") {
            bail!(
                "guest path \"{}\" must be absolute and free of `..`",
                file.guest
            );
        }
        files.push(FileGrant::open(
            &base.join(&file.host),
            &file.guest,
            matches!(file.mode, FileMode::ReadWrite),
        )?);
    }
    let mut vars = Vec::new();
    for (name, value) in &entry.env {
        let value = lookup
            .expand(value)
            .with_context(|| format!("env {name} = \"{value}\""))?;
        vars.push((name.clone(), value));
    }
    let mut config = BTreeMap::new();
    for (key, value) in &entry.config {
        let value = lookup
            .expand(value)
            .with_context(|| format!("config {key} = \"{value}\""))?;
        config.insert(key.clone(), value);
    }
    let mut network = Network::default();
    for grant in &entry.network {
        let parsed = grant
            .parse::<NetworkGrant>()
            .and_then(refuse_loopback_name)
            .with_context(|| format!("network grant \"{grant}\""))?;
        network.grants.push(parsed);
    }
    for inject in &entry.inject {
        network.inject.push(
            injection(inject, lookup, &network.grants, sources)
                .with_context(|| format!("inject for host \"{}\"", inject.host))?,
        );
    }
    Ok(Grants {
        files,
        env: vars,
        config: config.into(),
        network: network.into(),
    })
}

/// Refuses a grant of `localhost` (or a name under it): such names always resolve to loopback,
/// which moat refuses for a name, so no call could ever pass the grant.
fn refuse_loopback_name(grant: NetworkGrant) -> Result<NetworkGrant> {
    if let HostPattern::Name(name) | HostPattern::Subdomains(name) = &grant.host {
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        if name == "localhost" || name.ends_with(".localhost") {
            bail!(
                "localhost is always a loopback address, which moat refuses to reach by name \
                 (no call could pass this grant); grant the address itself, as in \
                 http://127.0.0.1:8080 or http://[::1]:8080"
            );
        }
    }
    Ok(grant)
}

/// Refuses a directory grant, read-only or not, that contains `path`, `what` (the secrets file,
/// every plugin's secrets; the credential store, every caller's consented tokens): the host
/// keeps them from every guest. A file not made yet is found by its folder.
pub(super) fn refuse_exposed(plugin: &str, grants: &Grants, path: &Path, what: &str) -> Result<()> {
    let canonical = path.canonicalize().or_else(|_| {
        let parent = path.parent().unwrap_or(Path::new("."));
        let name = path.file_name().unwrap_or_default();
        parent.canonicalize().map(|p| p.join(name))
    });
    let Ok(path) = canonical else {
        return Ok(());
    };
    match grants.files.iter().find(|g| path.starts_with(&g.host)) {
        Some(grant) => bail!(
            "plugin \"{plugin}\": its grant of {} contains {what} {}, which the host keeps \
             from every plugin; keep {what} outside the folders plugins are granted",
            grant.host.display(),
            path.display()
        ),
        None => Ok(()),
    }
}
