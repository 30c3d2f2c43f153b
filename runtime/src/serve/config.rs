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
//! fuel = 100000000             # Wasm instructions per call, about; unset: no count
//! files = [{ host = "./notes", guest = "/notes", mode = "rw" }]  # nothing unless listed
//! env = { NOTES_TITLE = "Mine", TOKEN = "${env:NOTES_TOKEN}" }   # from moat's environment
//! network = ["https://api.example.com", "*.wikipedia.org:443"]   # nothing unless listed
//! inject = [{ host = "api.example.com", header = "Authorization", value = "Bearer ${secret:API_TOKEN}" }]
//!
//! [plugins.notes.tools]        # by the names moat gives them: rename or hide a tool
//! notes_search = { name = "notes_find" }
//! notes_delete = { hide = true }
//! ```
//!
//! `${secret:NAME}` takes a value from the secrets file, a TOML table of strings readable only by
//! its owner, named at the top (`secrets = "secrets.toml"`) or by `moat serve --secrets`.
//!
//! Unknown keys are errors, so a typo never silently drops a setting; every string becomes a
//! checked type here, and the rest of moat never sees the raw file.
//!
//! The structs below also give the file's JSON Schema ([`json_schema`], committed as
//! `moat.schema.json`), so that editors check the file against exactly what moat reads.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use schemars::JsonSchema;
use serde::Deserialize;

use crate::sandbox::engine::PoolLimits;
use crate::sandbox::grants::{FileGrant, Grants};
use crate::sandbox::limits::{Limits, in_bytes};
use crate::sandbox::network::{HostPattern, Injected, Injection, Network, NetworkGrant};
use crate::serve::service::{self, Service};
use crate::supply::PluginSource;
use crate::supply::source::Source;
use crate::wit::naming::sanitize;
use crate::wit::naming::{ToolRule, ToolRules, check_tool_name};

/// moat's configuration: which plugins to serve, what each is granted and how much it may use.
/// Unknown keys are errors.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "moat.toml")]
struct ConfigFile {
    /// The secrets file for `${secret:NAME}` values, relative to this file: a TOML table of
    /// strings (`API_TOKEN = "…"`) that only its owner may read (mode 0600). `moat serve
    /// --secrets FILE` takes its place.
    secrets: Option<PathBuf>,
    /// The plugins to serve, by name (`[plugins.notes]`): ASCII letters, digits and `_`. A
    /// plugin's tools are named `NAME_TOOL`.
    #[serde(default)]
    #[schemars(extend("propertyNames" = { "pattern": "^[A-Za-z0-9_]+$" }))]
    plugins: BTreeMap<String, PluginEntry>,
    /// The audit log: one JSON line per tool call. `moat serve --audit FILE` takes its place.
    audit: Option<AuditSettings>,
    /// How HTTP callers prove who they are.
    auth: Option<service::AuthEntry>,
    /// Which callers may see and call which tools.
    #[serde(default)]
    access: Vec<service::AccessEntry>,
    /// What each caller may ask of moat, separately.
    quotas: Option<service::QuotasEntry>,
    /// How `moat serve --http` is reached.
    http: Option<service::HttpEntry>,
    /// Traces of tool calls.
    telemetry: Option<service::TelemetryEntry>,
    /// The Redis through which replicas of moat share quotas and sessions.
    cluster: Option<super::cluster::ClusterEntry>,
    /// Where a caller's own credentials for upstreams come from, by name (`[credentials.tracker]`),
    /// for the `inject` entries whose value names one: `"Bearer ${credential:tracker}"`.
    #[serde(default)]
    #[schemars(extend("propertyNames" = { "pattern": "^[A-Za-z0-9_.-]+$" }))]
    credentials: BTreeMap<String, super::credentials::CredentialsEntry>,
    /// Where callers' consented tokens (`[credentials.NAME] consent`) are kept across restarts,
    /// and where `moat credentials` lists and revokes them: `{ path = "credentials.sealed",
    /// key = "${secret:CREDENTIAL_STORE_KEY}" }`. Without it they live in memory only.
    credential_store: Option<super::credentials::StoreEntry>,
    /// How big a plugin's component may be. Read when moat starts; a reload keeps the values
    /// it started with.
    engine: Option<EngineEntry>,
}

/// `[engine]`: the parts of the engine's pool one instance of a plugin may take. Raising them
/// costs no memory: they cap an instance's share of the pool's totals, which grow with them.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct EngineEntry {
    /// Core module instances one instance of a plugin may hold: Rust components have a few,
    /// componentize-py's dozens (one per extension library).
    #[schemars(range(min = 1, max = 10000), extend("default" = PoolLimits::default().core_instances))]
    max_core_instances_per_plugin: Option<u32>,
    /// Linear memories one instance of a plugin may have.
    #[schemars(range(min = 1, max = 100), extend("default" = PoolLimits::default().memories))]
    max_memories_per_plugin: Option<u32>,
    /// Tables one instance of a plugin may have.
    #[schemars(range(min = 1, max = 1000), extend("default" = PoolLimits::default().tables))]
    max_tables_per_plugin: Option<u32>,
}

/// The `[engine]` table of `moat.toml`: the engine's pool limits, moat's defaults where unset.
pub fn read_engine(path: &Path) -> Result<PoolLimits> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let file: ConfigFile =
        toml::from_str(&text).with_context(|| format!("in {}", path.display()))?;
    let entry = file.engine.unwrap_or_default();
    let defaults = PoolLimits::default();
    let limits = PoolLimits {
        core_instances: entry
            .max_core_instances_per_plugin
            .unwrap_or(defaults.core_instances),
        memories: entry.max_memories_per_plugin.unwrap_or(defaults.memories),
        tables: entry.max_tables_per_plugin.unwrap_or(defaults.tables),
    };
    let bounds = [
        (
            "max_core_instances_per_plugin",
            limits.core_instances,
            10000,
        ),
        ("max_memories_per_plugin", limits.memories, 100),
        ("max_tables_per_plugin", limits.tables, 1000),
    ];
    for (key, value, most) in bounds {
        if !(1..=most).contains(&value) {
            bail!(
                "in {}: [engine] {key} = {value}: give 1 to {most}",
                path.display()
            );
        }
    }
    Ok(limits)
}

/// `[audit]`: where the audit log goes, and whether it records arguments in full.
#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AuditSettings {
    /// The log file, relative to moat.toml (`path = "audit.jsonl"`); created with mode 0600 and
    /// appended to. `-` writes the lines to standard output, for a log collector (HTTP only:
    /// on stdio, standard output carries MCP).
    pub path: PathBuf,
    /// `true` records each call's arguments in full; `false` (the default) only their sha256.
    #[serde(default)]
    pub arguments: bool,
}

/// The `[audit]` table of `moat.toml`, its path resolved against the file's folder.
pub fn read_audit(path: &Path) -> Result<Option<AuditSettings>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let file: ConfigFile =
        toml::from_str(&text).with_context(|| format!("in {}", path.display()))?;
    let base = path.parent().unwrap_or(Path::new("."));
    Ok(file.audit.map(|audit| AuditSettings {
        path: match audit.path.as_os_str() == crate::mcp::audit::STDOUT {
            true => audit.path.clone(),
            false => base.join(&audit.path),
        },
        ..audit
    }))
}

/// The `[auth]`, `[[access]]`, `[quotas]` and `[http]` tables of `moat.toml`, paths resolved
/// against its folder and `${secret:NAME}` taken from `secrets` (a flag's file) or the secrets
/// file the config names.
pub fn read_service(path: &Path, secrets: Option<&Path>) -> Result<Service> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let base = path.parent().unwrap_or(Path::new("."));
    let file: ConfigFile =
        toml::from_str(&text).with_context(|| format!("in {}", path.display()))?;
    let env = |name: &str| std::env::var(name).ok();
    let lookup = Lookup::new(&env, secrets, file.secrets.as_deref(), base)
        .with_context(|| format!("in {}", path.display()))?;
    service::parse(service::Tables {
        auth: file.auth,
        access: file.access,
        quotas: file.quotas,
        http: file.http,
        telemetry: file.telemetry,
        cluster: file.cluster,
        credentials: file.credentials,
        credential_store: file.credential_store,
        base,
        expand: &|text| lookup.expand(text),
    })
    .with_context(|| format!("in {}", path.display()))
}

/// `[plugins.NAME]`: one plugin, given by exactly one of `path` and `source`, with its grants
/// (nothing unless listed) and limits (moat's defaults unless set).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend("oneOf" = [{ "required": ["path"] }, { "required": ["source"] }]))]
struct PluginEntry {
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
    files: Vec<FileEntry>,
    /// Environment variables the plugin sees, by name. A value may take parts of moat's own
    /// environment (`${env:NAME}`) or of the secrets file (`${secret:NAME}`).
    ///
    /// `env = { TITLE = "Mine", TOKEN = "${env:NOTES_TOKEN}" }`
    #[serde(default)]
    #[schemars(extend("additionalProperties" = { "type": "string", "pattern": EXPANDED_PATTERN }))]
    env: BTreeMap<String, String>,
    /// Settings the plugin reads through `wasi:config/store`, by key; values expand as `env`'s
    /// do. Nothing unless listed.
    ///
    /// `config = { "api-url" = "https://api.example.org", token = "${secret:API_TOKEN}" }`
    #[serde(default)]
    #[schemars(extend("additionalProperties" = { "type": "string", "pattern": EXPANDED_PATTERN }))]
    config: BTreeMap<String, String>,
    /// Hosts the plugin may reach over HTTP, each `[scheme://]host[:port]`: a name, `*.` and a
    /// name for its subdomains, an IP address (IPv6 in brackets), or `*`; port `*` for any, the
    /// scheme's own port if left out. The host's own networks (loopback, private…) only by IP
    /// address.
    ///
    /// `network = ["https://api.open-meteo.com", "*.wikipedia.org:443"]`
    #[serde(default)]
    #[schemars(inner(regex(pattern = NETWORK_PATTERN)))]
    network: Vec<String>,
    /// Headers moat adds to the plugin's requests to a host, so that the plugin never holds the
    /// credential: over https unless the entry names plain http; a grant must allow it.
    ///
    /// `inject = [{ host = "api.example.com", header = "Authorization", value = "Bearer ${secret:API_TOKEN}" }]`
    #[serde(default)]
    inject: Vec<InjectEntry>,
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

/// A tool name, as [`check_tool_name`] wants it.
const TOOL_NAME_PATTERN: &str = r"^[A-Za-z0-9_-]{1,64}$";

/// A header moat adds to the plugin's requests to one host.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct InjectEntry {
    /// Where the header goes, as a `network` entry names it, except that no scheme means https
    /// only: `api.example.com` (https, port 443), `*.example.com:8443`, and plain http only when
    /// written out, `http://127.0.0.1:8080`. Some `network` grant must allow it.
    #[schemars(regex(pattern = NETWORK_PATTERN))]
    host: String,
    /// The header's name: `Authorization`, `X-Api-Key`.
    #[schemars(regex(pattern = r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$"))]
    header: String,
    /// The header's value; `${secret:NAME}` and `${env:NAME}` are replaced by their values:
    /// `"Bearer ${secret:API_TOKEN}"`. `${credential:NAME}` is the calling principal's own
    /// credential from `[credentials.NAME]`, found for each call: `"Bearer ${credential:tracker}"`.
    #[schemars(regex(pattern = INJECTED_PATTERN))]
    value: String,
}

/// A host folder the plugin may see.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct FileEntry {
    /// The folder on the host, relative to moat.toml: `"./notes"`.
    host: PathBuf,
    /// Where the plugin sees it: an absolute path without `..`, `"/notes"`.
    #[schemars(regex(pattern = GUEST_PATH_PATTERN))]
    guest: String,
    /// `"ro"` to read only, `"rw"` to read and write.
    mode: FileMode,
}

#[derive(Debug, Deserialize, JsonSchema)]
enum FileMode {
    /// Read only.
    #[serde(rename = "ro")]
    ReadOnly,
    /// Read and write.
    #[serde(rename = "rw")]
    ReadWrite,
}

/// A `source`: a path (with no `://`), or an `oci://`, `https://` or `http://` address.
const SOURCE_PATTERN: &str = r"^(?:(?:oci|https?)://.+|(?:[^:]|:+(?:/:+)*(?:[^/:]|/[^/:]|/?$))+)$";

/// A `network` entry's shape, `[scheme://]host[:port][/]`; moat checks the rest (canonical IP
/// addresses, port range) when it reads the file.
const NETWORK_PATTERN: &str = r"^(?:https?://)?(?:\*|(?:\*\.)?[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*\.?|\[[0-9A-Za-z:._-]+\])(?::(?:\*|[0-9]+))?/?$";

/// A string in which every `${` starts an `${env:NAME}` or a `${secret:NAME}`.
const EXPANDED_PATTERN: &str = r"^(?:[^$]|\$+(?:[^${]|$)|\$+\{(?:env|secret):[^}]+\})*$";

/// An `inject` value: as [`EXPANDED_PATTERN`], and `${credential:NAME}` too.
const INJECTED_PATTERN: &str = r"^(?:[^$]|\$+(?:[^${]|$)|\$+\{(?:env|secret|credential):[^}]+\})*$";

/// An absolute guest path none of whose parts is `..`.
const GUEST_PATH_PATTERN: &str = r"^(?:/(?:[^/]?|[^/.][^/]|\.[^/.]|[^/]{3,}))+$";

/// The commented `moat.toml` that `moat init` writes: a config moat reads and the schema fits.
pub const STARTER: &str = include_str!("starter.toml");

/// Reads `moat.toml` into plugin sources, paths resolved against the file's folder.
pub fn read(path: &Path) -> Result<Vec<PluginSource>> {
    read_with_secrets(path, None)
}

/// Reads `moat.toml` like [`read`], taking `${secret:NAME}` values from `secrets` (a flag's
/// file) instead of the file the config names.
pub fn read_with_secrets(path: &Path, secrets: Option<&Path>) -> Result<Vec<PluginSource>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let env = |name: &str| std::env::var(name).ok();
    parse(
        &text,
        path.parent().unwrap_or(Path::new(".")),
        &env,
        secrets,
    )
    .with_context(|| format!("in {}", path.display()))
}

/// Where `${env:NAME}` and `${secret:NAME}` values come from.
struct Lookup<'a> {
    env: &'a dyn Fn(&str) -> Option<String>,
    /// The secrets file's path and its values, when there is one.
    secrets: Option<(PathBuf, BTreeMap<String, String>)>,
}

impl<'a> Lookup<'a> {
    /// Lookups in `env` and in the secrets file: `secrets` (a flag's) or else `named` (the
    /// config's own, relative to `base`).
    fn new(
        env: &'a dyn Fn(&str) -> Option<String>,
        secrets: Option<&Path>,
        named: Option<&Path>,
        base: &Path,
    ) -> Result<Self> {
        let secrets = match secrets
            .map(Path::to_path_buf)
            .or(named.map(|p| base.join(p)))
        {
            Some(path) => Some((path.clone(), read_secrets(&path)?)),
            None => None,
        };
        Ok(Self { env, secrets })
    }

    /// `text` with every `${env:NAME}` and `${secret:NAME}` replaced by its value.
    fn expand(&self, text: &str) -> Result<String> {
        let mut out = String::new();
        let mut rest = text;
        while let Some(start) = rest.find("${") {
            out.push_str(&rest[..start]);
            let end = rest[start..]
                .find('}')
                .with_context(|| format!("`${{` without `}}` in \"{text}\""))?;
            let reference = &rest[start + 2..start + end];
            out.push_str(&self.value(reference)?);
            rest = &rest[start + end + 1..];
        }
        out.push_str(rest);
        Ok(out)
    }

    fn value(&self, reference: &str) -> Result<String> {
        match reference.split_once(':') {
            Some(("env", name)) => {
                (self.env)(name).with_context(|| format!("moat's environment has no {name}"))
            }
            Some(("secret", name)) => {
                let (path, secrets) = self.secrets.as_ref().with_context(|| {
                    format!(
                        "${{secret:{name}}} needs a secrets file: set `secrets = \"…\"` in \
                         moat.toml or pass --secrets"
                    )
                })?;
                secrets
                    .get(name)
                    .cloned()
                    .with_context(|| format!("the secrets file {} has no {name}", path.display()))
            }
            _ => bail!("`${{{reference}}}` is neither ${{env:NAME}} nor ${{secret:NAME}}"),
        }
    }
}

/// Reads a secrets file: a TOML table of strings that only its owner may read.
fn read_secrets(path: &Path) -> Result<BTreeMap<String, String>> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path)
        .with_context(|| format!("reading the secrets file {}", path.display()))?
        .permissions()
        .mode();
    if mode & 0o077 != 0 {
        bail!(
            "the secrets file {} is open to its group or others (mode {:03o}); make it private \
             with `chmod 600 {}`",
            path.display(),
            mode & 0o777,
            path.display()
        );
    }
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the secrets file {}", path.display()))?;
    parse_secrets(&text).with_context(|| {
        format!(
            "the secrets file {} must be a TOML table of strings (NAME = \"value\")",
            path.display()
        )
    })
}

/// Parses a secrets file's text. An error names the line and what is wrong, never the line
/// itself: toml's own message quotes the source, and that line holds a secret.
fn parse_secrets(text: &str) -> Result<BTreeMap<String, String>> {
    let line_of = |offset: usize| text[..offset.min(text.len())].matches('\n').count() + 1;
    let table: BTreeMap<String, toml::Spanned<toml::Value>> = match toml::from_str(text) {
        Ok(table) => table,
        Err(error) => {
            let at = error.span().map_or_else(String::new, |span| {
                format!("line {}: ", line_of(span.start))
            });
            // The parser's own description ("invalid string, expected `\"`") names tokens,
            // not the text; only the rendered error quotes the line.
            let what = error.message().lines().next().unwrap_or_default();
            bail!("{at}not valid TOML: {what} (the line is not shown: it may hold a secret)");
        }
    };
    table
        .into_iter()
        .map(|(name, value)| {
            let line = line_of(value.span().start);
            match value.into_inner() {
                toml::Value::String(value) => Ok((name, value)),
                other => bail!(
                    "line {line}: {name} is not a string but a TOML {}",
                    other.type_str()
                ),
            }
        })
        .collect()
}

/// Parses a config file's text; `env` looks up moat's own environment for `${env:NAME}`, and
/// `secrets` overrides the secrets file the text names.
pub fn parse(
    text: &str,
    base: &Path,
    env: &dyn Fn(&str) -> Option<String>,
    secrets: Option<&Path>,
) -> Result<Vec<PluginSource>> {
    let file: ConfigFile = toml::from_str(text)?;
    let lookup = Lookup::new(env, secrets, file.secrets.as_deref(), base)?;
    let sources = super::credentials::sources(&file.credentials, &|text| lookup.expand(text))?;
    // Files no plugin's grant may contain: each holds what the host keeps from every guest.
    let mut protected: Vec<(PathBuf, &str)> = Vec::new();
    if let Some((secrets, _)) = &lookup.secrets {
        protected.push((secrets.clone(), "the secrets file"));
    }
    if let Some(store) = file.credential_store.as_ref().and_then(|s| s.path()) {
        protected.push((base.join(store), "the credential store"));
    }
    file.plugins
        .into_iter()
        .map(|(name, entry)| {
            if name.is_empty() || sanitize(&name) != name {
                bail!("plugin name \"{name}\" may hold only ASCII letters, digits and `_`");
            }
            let grants = grants(&entry, base, &lookup, &sources)
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

/// Refuses a directory grant, read-only or not, that contains `path`, `what` (the secrets file,
/// every plugin's secrets; the credential store, every caller's consented tokens): the host
/// keeps them from every guest. A file not made yet is found by its folder.
fn refuse_exposed(plugin: &str, grants: &Grants, path: &Path, what: &str) -> Result<()> {
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

fn grants(
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

fn injection(
    entry: &InjectEntry,
    lookup: &Lookup,
    grants: &[NetworkGrant],
    sources: &BTreeMap<String, crate::upstream::Source>,
) -> Result<Injection> {
    let to = Injection::target(&entry.host)?;
    let header = http::HeaderName::try_from(&entry.header)
        .with_context(|| format!("`{}` is not a valid header name", entry.header))?;
    // The error must not quote the value: it may hold a secret.
    let invalid = "the value is not a valid header value (control characters?)";
    let value = match super::credentials::credential_reference(&entry.value)? {
        None => {
            let mut value = http::HeaderValue::try_from(lookup.expand(&entry.value)?)
                .ok()
                .context(invalid)?;
            value.set_sensitive(true);
            Injected::Fixed(value)
        }
        Some((before, source, after)) => {
            let Some(found) = sources.get(source) else {
                bail!(
                    "`${{credential:{source}}}` names no source: add [credentials.{source}] to \
                     moat.toml{}",
                    match sources.keys().map(String::as_str).collect::<Vec<_>>() {
                        names if names.is_empty() => String::new(),
                        names => format!(" (it has {})", names.join(", ")),
                    }
                );
            };
            if !found.hosts.iter().any(|host| host.covers(&to)) {
                bail!(
                    "[credentials.{source}] may be sent only to {}, and {to} is not one of them",
                    found
                        .hosts
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            }
            let (before, after) = (lookup.expand(before)?, lookup.expand(after)?);
            http::HeaderValue::try_from(format!("{before}credential{after}"))
                .ok()
                .context(invalid)?;
            Injected::Caller {
                source: source.to_string(),
                before,
                after,
            }
        }
    };
    let injection = Injection { to, header, value };
    if !grants.iter().any(|g| injection.can_travel_under(g)) {
        bail!(
            "no network grant allows requests to {}, so the header would never be sent (no \
             scheme means https only; write `http://HOST:PORT` to inject over plain http)",
            injection.to
        );
    }
    Ok(injection)
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
                tools: ToolRules::new(),
            });
        }
    }
    Ok(sources)
}

/// The JSON Schema of `moat.toml`, generated from the structs moat reads it into, so that it
/// says exactly what moat accepts; `moat config schema` prints it for editors.
pub fn json_schema() -> serde_json::Value {
    schemars::generate::SchemaSettings::draft2020_12()
        .with_transform(schemars::transform::RecursiveTransform(without_null))
        .into_generator()
        .into_root_schema_for::<ConfigFile>()
        .to_value()
}

/// Drops the `null` that schemars allows for an `Option`: TOML has no null, and a setting is
/// left unset by leaving it out.
fn without_null(schema: &mut schemars::Schema) {
    use serde_json::Value;
    let Some(object) = schema.as_object_mut() else {
        return;
    };
    if let Some(Value::Array(types)) = object.get_mut("type") {
        types.retain(|t| t != "null");
        if let [only] = types.as_slice() {
            let only = only.clone();
            object.insert("type".into(), only);
        }
    }
    if let Some(Value::Array(alternatives)) = object.get_mut("anyOf") {
        alternatives.retain(|a| a.get("type").is_none_or(|t| t != "null"));
        if let [Value::Object(only)] = alternatives.as_slice() {
            let only = only.clone();
            object.remove("anyOf");
            for (key, value) in only {
                object.entry(key).or_insert(value);
            }
        }
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
            &no_env,
            None,
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
            None,
        )
        .unwrap_err();
        assert!(
            format!("{error:#}").contains("unknown field `deadline`"),
            "{error:#}"
        );
    }

    #[test]
    fn tools_are_renamed_or_hidden() {
        let parse_tools = |table: &str| {
            parse(
                &format!("[plugins.x]\npath = \"x.wasm\"\n[plugins.x.tools]\n{table}"),
                Path::new("."),
                &no_env,
                None,
            )
            .map(|sources| sources[0].tools.clone())
            .map_err(|e| format!("{e:#}"))
        };
        assert_eq!(
            parse_tools("x_read_file = { name = \"x_fetch\" }\nx_write = { hide = true }\n"),
            Ok(ToolRules::from([
                ("x_read_file".into(), ToolRule::Rename("x_fetch".into())),
                ("x_write".into(), ToolRule::Hide),
            ]))
        );
        for (table, expected) in [
            (
                "a = { name = \"bad name\" }",
                "tool name \"bad name\" must be",
            ),
            ("a = { name = \"b\", hide = true }", "not both"),
            ("a = { hide = false }", "give `name"),
            ("a = {}", "give `name"),
            ("a = { rename = \"b\" }", "unknown field `rename`"),
        ] {
            let error = parse_tools(table).unwrap_err();
            assert!(error.contains(expected), "{table}: {error}");
        }
    }

    #[test]
    fn plugin_names_are_checked() {
        let error = parse(
            "[plugins.\"a.b\"]\npath = \"e.wasm\"\n",
            Path::new("."),
            &no_env,
            None,
        )
        .unwrap_err();
        assert!(error.to_string().contains("may hold only"), "{error}");
    }

    #[test]
    fn a_malformed_secrets_file_is_reported_without_its_secrets() {
        for (text, expected) in [
            (
                "A = \"ok\"\nTOKEN = \"sk-live-9f2e\n",
                "line 2: not valid TOML",
            ),
            (
                "A = \"ok\"\n\nTOKEN = sk-live-9f2e\n",
                "line 3: not valid TOML",
            ),
            ("TOKEN = \"sk-live-9f2e\" junk\n", "line 1: not valid TOML"),
            (
                "A = \"ok\"\nTOKEN = 0x9f2e\n",
                "line 2: TOKEN is not a string but a TOML integer",
            ),
            (
                "[TOKEN]\nsk-live-9f2e = \"x\"\n",
                "line 1: TOKEN is not a string but a TOML table",
            ),
        ] {
            let error = format!("{:#}", parse_secrets(text).unwrap_err());
            assert!(error.contains(expected), "{text:?}: {error}");
            for secret in ["sk-live", "9f2e"] {
                assert!(!error.contains(secret), "{text:?} quoted: {error}");
            }
        }
        let parsed = parse_secrets("A = \"x\"\nB = 'y'\n").unwrap();
        assert_eq!(parsed["A"], "x");
        assert_eq!(parsed["B"], "y");
    }

    #[test]
    fn no_grant_may_contain_the_secrets_file() {
        let dir = std::env::temp_dir().join(format!("moat-config-exposed-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("keys")).unwrap();
        std::fs::create_dir_all(dir.join("data")).unwrap();
        let secrets = dir.join("keys/secrets.toml");
        std::fs::write(&secrets, "TOKEN = \"tok\"\n").unwrap();
        set_mode(&secrets, 0o600);
        let env = |_: &str| None;
        let config = |folder: &str| {
            format!(
                "secrets = \"keys/secrets.toml\"\n[plugins.notes]\npath = \"n.wasm\"\n\
                 files = [{{ host = \"{folder}\", guest = \"/d\", mode = \"ro\" }}]\n"
            )
        };
        parse(&config("data"), &dir, &env, None).unwrap();
        // Read-only is enough to read every plugin's secrets: refused, from the file's folder or
        // any folder above it, whether the config or the command line names the secrets file.
        for folder in ["keys", "."] {
            let error = format!(
                "{:#}",
                parse(&config(folder), &dir, &env, None).unwrap_err()
            );
            assert!(
                error.contains("plugin \"notes\": its grant of")
                    && error.contains("contains the secrets file"),
                "{error}"
            );
        }
        let flag = "[plugins.notes]\npath = \"n.wasm\"\n\
                    files = [{ host = \".\", guest = \"/d\", mode = \"rw\" }]\n";
        let error = parse(flag, &dir, &env, Some(&secrets)).unwrap_err();
        assert!(
            format!("{error:#}").contains("contains the secrets file"),
            "{error:#}"
        );
        // The credential store too, made or not yet: every caller's consented tokens.
        let store = "credential_store = { path = \"state/credentials.sealed\", key = \"k\" }\n";
        std::fs::create_dir_all(dir.join("state")).unwrap();
        for folder in ["state", "."] {
            let text = format!(
                "{store}{}",
                config(folder).replace("secrets = \"keys/secrets.toml\"\n", "")
            );
            let error = format!("{:#}", parse(&text, &dir, &env, None).unwrap_err());
            assert!(
                error.contains("contains the credential store")
                    && error.contains("credentials.sealed"),
                "{error}"
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn network_grants_secrets_and_injections() {
        let dir = std::env::temp_dir().join(format!("moat-config-net-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let secrets = dir.join("secrets.toml");
        std::fs::write(&secrets, "API_TOKEN = \"tok-123\"\n").unwrap();
        set_mode(&secrets, 0o600);
        let config = r#"secrets = "secrets.toml"
[plugins.api]
path = "a.wasm"
network = ["https://api.example.com", "*.wikipedia.org:443", "http://127.0.0.1:8080"]
inject = [{ host = "api.example.com", header = "Authorization", value = "Bearer ${secret:API_TOKEN}" }]
env = { KEY = "${secret:API_TOKEN}", MIXED = "a-${env:HOST_NAME}-b" }
"#;
        let env = |name: &str| (name == "HOST_NAME").then(|| "h".to_string());
        let sources = parse(config, &dir, &env, None).unwrap();
        let grants = &sources[0].grants;
        let printed: Vec<String> = grants
            .network
            .grants
            .iter()
            .map(|g| g.to_string())
            .collect();
        assert_eq!(
            printed,
            [
                "https://api.example.com",
                "*.wikipedia.org:443",
                "http://127.0.0.1:8080"
            ]
        );
        let Injected::Fixed(value) = &grants.network.inject[0].value else {
            panic!("a fixed value")
        };
        assert_eq!(value, "Bearer tok-123");
        assert!(value.is_sensitive());
        assert!(!format!("{:?}", grants.network).contains("tok-123"));
        assert_eq!(
            grants.env,
            [
                ("KEY".into(), "tok-123".into()),
                ("MIXED".into(), "a-h-b".into())
            ]
        );

        set_mode(&secrets, 0o640);
        let error = parse(config, &dir, &env, None).unwrap_err();
        assert!(
            format!("{error:#}").contains(
                "is open to its group or others (mode 640); make it private with `chmod 600"
            ),
            "{error:#}"
        );
        set_mode(&secrets, 0o600);

        for (bad, expected) in [
            (
                r#"network = ["ftp://x.org"]"#,
                "scheme `ftp` is not http or https",
            ),
            (
                r#"network = ["http://2130706433"]"#,
                "not a canonical IP address",
            ),
            (
                r#"network = ["https://a.org"]
inject = [{ host = "b.org", header = "X-Key", value = "v" }]"#,
                "no network grant allows requests to https://b.org",
            ),
            (
                // A grant without a scheme lets plain http through, but the header stays home.
                r#"network = ["http://127.0.0.1:8080"]
inject = [{ host = "127.0.0.1", header = "X-Key", value = "v" }]"#,
                "no network grant allows requests to https://127.0.0.1, so the header would never",
            ),
            (
                r#"network = ["a.org"]
inject = [{ host = "a.org:8443", header = "X-Key", value = "v" }]"#,
                "no network grant allows requests to https://a.org:8443",
            ),
            (
                r#"network = ["https://a.org"]
inject = [{ host = "a.org", header = "X Key", value = "v" }]"#,
                "not a valid header name",
            ),
            (r#"env = { K = "${secret:NOPE}" }"#, "has no NOPE"),
            (
                r#"env = { K = "${file:/etc/passwd}" }"#,
                "is neither ${env:NAME} nor ${secret:NAME}",
            ),
        ] {
            let text =
                format!("secrets = \"secrets.toml\"\n[plugins.p]\npath = \"p.wasm\"\n{bad}\n");
            let error = parse(&text, &dir, &env, None).unwrap_err();
            assert!(format!("{error:#}").contains(expected), "{bad}: {error:#}");
        }
        let error = parse(
            "[plugins.p]\npath = \"p.wasm\"\nenv = { K = \"${secret:X}\" }\n",
            &dir,
            &env,
            None,
        )
        .unwrap_err();
        assert!(
            format!("{error:#}").contains("needs a secrets file"),
            "{error:#}"
        );
        // A flag's file takes the place of the one the config names.
        let other = dir.join("other.toml");
        std::fs::write(&other, "API_TOKEN = \"from-flag\"\n").unwrap();
        set_mode(&other, 0o600);
        let sources = parse(config, &dir, &env, Some(&other)).unwrap();
        assert!(matches!(
            &sources[0].grants.network.inject[0].value,
            Injected::Fixed(v) if v == "Bearer from-flag"
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_injection_may_take_the_callers_credential_from_a_source() {
        let config = |inject: &str| {
            format!(
                r#"[credentials.tracker]
hosts = ["api.tracker.example", "http://127.0.0.1:9300"]
principals = {{ stdio = "t-0123456789" }}

[plugins.p]
path = "p.wasm"
network = ["https://api.tracker.example", "https://other.example", "http://127.0.0.1:9300"]
inject = [{inject}]
"#
            )
        };
        let sources = parse(
            &config(r#"{ host = "api.tracker.example", header = "Authorization", value = "Bearer ${credential:tracker}" }"#),
            Path::new("."),
            &no_env,
            None,
        )
        .unwrap();
        assert_eq!(
            sources[0].grants.network.inject[0].value,
            Injected::Caller {
                source: "tracker".into(),
                before: "Bearer ".into(),
                after: String::new(),
            }
        );
        for (inject, expected) in [
            (
                r#"{ host = "api.tracker.example", header = "Authorization", value = "Bearer ${credential:wiki}" }"#,
                "`${credential:wiki}` names no source: add [credentials.wiki] to moat.toml (it has tracker)",
            ),
            (
                // Granted to the plugin, but not a host the source's credentials may go to.
                r#"{ host = "other.example", header = "Authorization", value = "Bearer ${credential:tracker}" }"#,
                "[credentials.tracker] may be sent only to https://api.tracker.example, http://127.0.0.1:9300, and https://other.example is not one of them",
            ),
            (
                r#"{ host = "http://127.0.0.1:9300", header = "Authorization", value = "${credential:tracker}${credential:tracker}" }"#,
                "a value may name one credential only",
            ),
        ] {
            let error = parse(&config(inject), Path::new("."), &no_env, None).unwrap_err();
            assert!(
                format!("{error:#}").contains(expected),
                "{inject}: {error:#}"
            );
        }
    }

    #[test]
    fn the_committed_schema_is_what_moat_generates() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../moat.schema.json");
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        let generated = serde_json::to_string_pretty(&json_schema()).unwrap() + "\n";
        assert!(
            committed == generated,
            "moat.schema.json differs from the structs moat.toml is read into; regenerate it \
             from the repository root: `cargo run -p moat -- config schema > moat.schema.json`"
        );
    }

    fn set_mode(path: &Path, mode: u32) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn a_size_too_large_to_count_is_refused() {
        let error = parse(
            "[plugins.echo]\npath = \"echo.wasm\"\nmax_memory_mb = 9223372036854775807\n",
            Path::new("/etc/moat"),
            &no_env,
            None,
        )
        .unwrap_err();
        assert_eq!(
            format!("{error:#}"),
            "plugin \"echo\": max_memory_mb = 9223372036854775807 is too large"
        );
    }

    #[test]
    fn a_plugin_has_a_path_or_a_source() {
        let sources = parse(
            "[plugins.a]\nsource = \"oci://127.0.0.1:5000/a:1\"\n\
             [plugins.b]\nsource = \"https://example.com/b.wasm\"\n\
             [plugins.c]\nsource = \"c.wasm\"\n",
            Path::new("/etc/moat"),
            &no_env,
            None,
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
            let error = parse(&text, Path::new("."), &no_env, None).unwrap_err();
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
            None,
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
            let error = parse(&text, &dir, &env, None).unwrap_err();
            assert!(format!("{error:#}").contains(expected), "{bad}: {error:#}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
