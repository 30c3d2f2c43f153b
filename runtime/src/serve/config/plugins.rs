//! `[plugins.NAME]`: which plugins to serve, where each comes from, its limits and its tools.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use schemars::JsonSchema;
use serde::Deserialize;

use super::expand::Lookup;
use super::grants::{FileEntry, grants, refuse_exposed};
use super::inject::InjectEntry;
use super::schema::{EXPANDED_PATTERN, NETWORK_PATTERN, SOURCE_PATTERN, TOOL_NAME_PATTERN};
use crate::sandbox::limits::{Limits, in_bytes};
use crate::serve::credentials::{CredentialsEntry, StoreEntry};
use crate::supply::PluginSource;
use crate::supply::source::Source;
use crate::wit::naming::sanitize;
use crate::wit::naming::{ToolRule, ToolRules, check_tool_name};

/// `[plugins.NAME]`: one plugin, given by exactly one of `path` and `source`, with its grants
/// (nothing unless listed) and limits (moat's defaults unless set).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend("oneOf" = [{ "required": ["path"] }, { "required": ["source"] }]))]
pub(super) struct PluginEntry {
    /// The component file, relative to moat.toml (`path = "plugins/notes.wasm"`); the same as
    /// `source` with a path.
    path: Option<PathBuf>,
    /// Where the component comes from: a file relative to moat.toml, `https://…/notes.wasm`
    /// (plain `http://` only to loopback), or an OCI reference `oci://ghcr.io/acme/notes:1.2`
    /// or `oci://…@sha256:…`.
    #[schemars(regex(pattern = SOURCE_PATTERN))]
    source: Option<String>,
    /// Wall-clock time a call may take, instantiation included, in milliseconds; at least 1.
    #[schemars(range(min = 1), extend("default" = Limits::default().deadline.as_millis() as u64))]
    deadline_ms: Option<u64>,
    /// The most linear memory an instance may grow to, all its memories together, in MiB: 1 to
    /// 1024, the most moat's engine gives any instance.
    #[schemars(
        range(min = 1, max = MAX_MEMORY_MB),
        extend("default" = Limits::default().max_memory_bytes >> 20)
    )]
    max_memory_mb: Option<usize>,
    /// The most a call may write to stdout, and again to stderr, in KiB.
    #[schemars(extend("default" = Limits::default().max_output_bytes >> 10))]
    max_output_kb: Option<usize>,
    /// The largest result a call may return, in KiB (the bytes of its strings and lists).
    #[schemars(extend("default" = Limits::default().max_result_bytes >> 10))]
    max_result_kb: Option<usize>,
    /// Calls of this plugin that may run at once; at least 1.
    #[schemars(range(min = 1), extend("default" = Limits::default().max_concurrent_calls))]
    max_concurrent_calls: Option<usize>,
    /// Calls that may wait for a free slot; one more fails at once.
    #[schemars(extend("default" = Limits::default().max_queued_calls))]
    max_queued_calls: Option<usize>,
    /// About how many Wasm instructions a call may run (`fuel = 100000000`); at least 1. Left
    /// out: no count. Counting slows every plugin's guest code, so moat counts only when some
    /// plugin sets it.
    #[schemars(range(min = 1))]
    fuel: Option<u64>,
    /// Host folders the plugin may see, each at a path of its own.
    ///
    /// `files = [{ host = "./notes", guest = "/notes", mode = "rw" }]`
    #[serde(default)]
    pub(super) files: Vec<FileEntry>,
    /// Environment variables the plugin sees, by name. A value may take parts of moat's own
    /// environment (`${env:NAME}`) or of the secrets file (`${secret:NAME}`).
    ///
    /// `env = { TITLE = "Mine", TOKEN = "${env:NOTES_TOKEN}" }`
    #[serde(default)]
    #[schemars(extend("additionalProperties" = { "type": "string", "pattern": EXPANDED_PATTERN }))]
    pub(super) env: BTreeMap<String, String>,
    /// Settings the plugin reads through `wasi:config/store`, by key; values expand as `env`'s
    /// do. Nothing unless listed.
    ///
    /// `config = { "api-url" = "https://api.example.org", token = "${secret:API_TOKEN}" }`
    #[serde(default)]
    #[schemars(extend("additionalProperties" = { "type": "string", "pattern": EXPANDED_PATTERN }))]
    pub(super) config: BTreeMap<String, String>,
    /// Hosts the plugin may reach over HTTP, each `[scheme://]host[:port]`: a name, `*.` and a
    /// name for its subdomains, an IP address (IPv6 in brackets), or `*`; port `*` for any, the
    /// scheme's own port if left out. The host's own networks (loopback, private…) only by IP
    /// address.
    ///
    /// `network = ["https://api.open-meteo.com", "*.wikipedia.org:443"]`
    #[serde(default)]
    #[schemars(inner(regex(pattern = NETWORK_PATTERN)))]
    pub(super) network: Vec<String>,
    /// Headers moat adds to the plugin's requests to a host, so that the plugin never holds the
    /// credential: over https unless the entry names plain http; a grant must allow it.
    ///
    /// `inject = [{ host = "api.example.com", header = "Authorization", value = "Bearer ${secret:API_TOKEN}" }]`
    #[serde(default)]
    pub(super) inject: Vec<InjectEntry>,
    /// Tools renamed or hidden, each by the name moat gives it (`NAME_TOOL`, as `tools/list`
    /// shows it): to settle a clash with another plugin's tool, or to withhold one.
    ///
    /// `[plugins.notes.tools]` `notes_search = { name = "notes_find" }`, `notes_delete = { hide = true }`
    #[serde(default)]
    tools: BTreeMap<String, ToolEntry>,
}

/// One tool, renamed (`{ name = "notes_find" }`) or hidden (`{ hide = true }`).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend("oneOf" = [{ "required": ["name"] }, { "required": ["hide"] }]))]
struct ToolEntry {
    /// The name to offer the tool under: 1 to 64 ASCII letters, digits, `_` or `-`; like any
    /// name, it may not be another tool's.
    #[schemars(regex(pattern = TOOL_NAME_PATTERN))]
    name: Option<String>,
    /// `true`: the tool is neither listed nor callable.
    hide: Option<bool>,
}

/// Every plugin of `plugins`, checked into its source: paths resolved against `base`, `${…}`
/// expanded by `lookup`, `${credential:NAME}` checked against `credentials`, and no grant over
/// the secrets file or the credential store.
pub(super) fn sources(
    plugins: BTreeMap<String, PluginEntry>,
    credentials: &BTreeMap<String, CredentialsEntry>,
    credential_store: Option<&StoreEntry>,
    base: &Path,
    lookup: &Lookup,
) -> Result<Vec<PluginSource>> {
    let sources = crate::serve::credentials::sources(credentials, &|text| lookup.expand(text))?;
    // Files no plugin's grant may contain: each holds what the host keeps from every guest.
    let mut protected: Vec<(PathBuf, &str)> = Vec::new();
    if let Some((secrets, _)) = &lookup.secrets {
        protected.push((secrets.clone(), "the secrets file"));
    }
    if let Some(store) = credential_store.and_then(|s| s.path()) {
        protected.push((base.join(store), "the credential store"));
    }
    plugins
        .into_iter()
        .map(|(name, entry)| {
            if name.is_empty() || sanitize(&name) != name {
                bail!("plugin name \"{name}\" may hold only ASCII letters, digits and `_`");
            }
            let grants = grants(&entry, base, lookup, &sources)
                .with_context(|| format!("in the grants of plugin \"{name}\""))?;
            let defaults = Limits::default();
            let limits = Limits {
                deadline: entry
                    .deadline_ms
                    .map_or(defaults.deadline, Duration::from_millis),
                max_memory_bytes: in_bytes(entry.max_memory_mb, 20, "max_memory_mb")
                    .with_context(|| format!("plugin \"{name}\""))?
                    .unwrap_or(defaults.max_memory_bytes),
                max_output_bytes: in_bytes(entry.max_output_kb, 10, "max_output_kb")
                    .with_context(|| format!("plugin \"{name}\""))?
                    .unwrap_or(defaults.max_output_bytes),
                max_result_bytes: in_bytes(entry.max_result_kb, 10, "max_result_kb")
                    .with_context(|| format!("plugin \"{name}\""))?
                    .unwrap_or(defaults.max_result_bytes),
                max_concurrent_calls: entry
                    .max_concurrent_calls
                    .unwrap_or(defaults.max_concurrent_calls),
                max_queued_calls: entry.max_queued_calls.unwrap_or(defaults.max_queued_calls),
                fuel: entry.fuel,
            };
            check_limits(&entry).with_context(|| format!("plugin \"{name}\""))?;
            if limits.fuel == Some(0) {
                bail!("plugin \"{name}\": fuel must be at least 1 (leave it out for no limit)");
            }
            if limits.max_concurrent_calls == 0 {
                bail!("plugin \"{name}\": max_concurrent_calls must be at least 1");
            }
            for (path, what) in &protected {
                refuse_exposed(&name, &grants, path, what)?;
            }
            let source =
                plugin_source(&entry, base).with_context(|| format!("plugin \"{name}\""))?;
            let tools =
                tool_rules(&entry.tools).with_context(|| format!("in [plugins.{name}.tools]"))?;
            Ok(PluginSource {
                name,
                source,
                limits,
                grants,
                tools,
            })
        })
        .collect()
}

/// The most memory moat's engine lets any instance have, in MiB.
const MAX_MEMORY_MB: usize = crate::sandbox::engine::MAX_MEMORY_BYTES >> 20;

/// Refuses limits that would load but could never be honoured: every call failing at once, or
/// memory reported as granted beyond what the engine gives any instance.
fn check_limits(entry: &PluginEntry) -> Result<()> {
    if entry.deadline_ms == Some(0) {
        bail!("deadline_ms = 0 would stop every call before it starts; give at least 1");
    }
    match entry.max_memory_mb {
        Some(0) => {
            bail!("max_memory_mb = 0 leaves no memory for any instance; give 1 to {MAX_MEMORY_MB}")
        }
        Some(mb) if mb > MAX_MEMORY_MB => bail!(
            "max_memory_mb = {mb} is more than the {MAX_MEMORY_MB} MiB moat's engine gives any \
             instance; give at most {MAX_MEMORY_MB}"
        ),
        _ => Ok(()),
    }
}

fn tool_rules(entries: &BTreeMap<String, ToolEntry>) -> Result<ToolRules> {
    entries
        .iter()
        .map(|(tool, entry)| {
            let rule = match (&entry.name, entry.hide) {
                (Some(name), None | Some(false)) => {
                    check_tool_name(name).with_context(|| format!("`{tool}`"))?;
                    ToolRule::Rename(name.clone())
                }
                (None, Some(true)) => ToolRule::Hide,
                (Some(_), Some(true)) => bail!("`{tool}`: give `name` or `hide`, not both"),
                (None, _) => bail!("`{tool}`: give `name = \"…\"` or `hide = true`"),
            };
            Ok((tool.clone(), rule))
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
