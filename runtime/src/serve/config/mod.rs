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

mod audit;
mod console;
mod engine;
mod expand;
mod grants;
mod inject;
mod plugins;
mod policy;
mod schema;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use schemars::JsonSchema;
use serde::Deserialize;

pub use audit::AuditSettings;
pub use console::{Admin, ConsoleSettings};
pub use policy::PolicyEntry;
pub use schema::json_schema;

use crate::sandbox::engine::PoolLimits;
use crate::sandbox::grants::Grants;
use crate::sandbox::limits::Limits;
use crate::serve::service::{self, Service};
use crate::supply::PluginSource;
use crate::supply::source::Source;
use crate::wit::naming::ToolRules;
use expand::Lookup;

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
    plugins: BTreeMap<String, plugins::PluginEntry>,
    /// The audit log: one JSON line per tool call. `moat serve --audit FILE` takes its place.
    audit: Option<AuditSettings>,
    /// How HTTP callers prove who they are.
    auth: Option<service::AuthEntry>,
    /// Which callers may see and call which tools.
    #[serde(default)]
    access: Vec<service::AccessEntry>,
    /// Policies in Cedar over each call, list and outgoing request.
    policy: Option<PolicyEntry>,
    /// What each caller may ask of moat, separately.
    quotas: Option<service::QuotasEntry>,
    /// How `moat serve --http` is reached.
    http: Option<service::HttpEntry>,
    /// The operators' web page, off unless given.
    console: Option<console::ConsoleEntry>,
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
    engine: Option<engine::EngineEntry>,
}

impl ConfigFile {
    /// Takes the service tables out of the file, checked: paths resolved against `base`, and
    /// `${…}` expanded by `lookup`.
    fn take_service(&mut self, base: &Path, lookup: &Lookup) -> Result<Service> {
        service::parse(service::Tables {
            auth: self.auth.take(),
            access: std::mem::take(&mut self.access),
            quotas: self.quotas.take(),
            http: self.http.take(),
            telemetry: self.telemetry.take(),
            cluster: self.cluster.take(),
            credentials: &self.credentials,
            credential_store: self.credential_store.as_ref(),
            base,
            expand: &|text| lookup.expand(text),
        })
    }
}

/// Everything `moat serve` takes from `moat.toml`, from one reading of it and of its secrets
/// file. The start and every reload prepare and swap from one such value, so an edit that
/// lands meanwhile cannot pair one version's access tables with another's plugins.
#[derive(Clone, Debug, Default)]
pub struct Config {
    /// `[auth]`, `[[access]]`, `[quotas]`, `[http]`, `[telemetry]`, `[cluster]` and
    /// `[credentials]`.
    pub service: Service,
    /// `[audit]`, its path resolved against the file's folder.
    pub audit: Option<AuditSettings>,
    /// `[plugins.NAME]`, paths resolved against the file's folder.
    pub plugins: Vec<PluginSource>,
    /// `[engine]`, moat's defaults where unset.
    pub engine: PoolLimits,
    /// `[policy]`, paths resolved against the file's folder.
    pub policy: PolicyEntry,
    /// `[console]`, when given.
    pub console: Option<ConsoleSettings>,
    /// The file as it was read, for the console to show (masked).
    pub text: String,
}

/// Reads `moat.toml` once, and the secrets file once (`secrets`, a flag's, or else the one the
/// config names), into every table moat serves.
pub fn load(path: &Path, secrets: Option<&Path>) -> Result<Config> {
    let within = || format!("in {}", path.display());
    let base = folder(path);
    let (mut file, text) = read_file_and_text(path)?;
    let env = |name: &str| std::env::var(name).ok();
    let lookup = Lookup::new(&env, secrets, file.secrets.as_deref(), base).with_context(within)?;
    let service = file.take_service(base, &lookup).with_context(within)?;
    let console = file
        .console
        .take()
        .map(|c| c.settings())
        .transpose()
        .with_context(within)?;
    let plugins = plugins::sources(
        file.plugins,
        &file.credentials,
        file.credential_store.as_ref(),
        base,
        &lookup,
    )
    .with_context(within)?;
    Ok(Config {
        service,
        audit: audit::resolved(file.audit, base),
        plugins,
        engine: engine::limits(file.engine, path)?,
        policy: (file.policy.unwrap_or_default().resolved(base)).with_context(within)?,
        console,
        text,
    })
}

/// The file at `path`, parsed; its errors name it.
fn read_file(path: &Path) -> Result<ConfigFile> {
    Ok(read_file_and_text(path)?.0)
}

/// The file at `path`, parsed, and its text as read.
fn read_file_and_text(path: &Path) -> Result<(ConfigFile, String)> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let file = toml::from_str(&text).with_context(|| format!("in {}", path.display()))?;
    Ok((file, text))
}

/// The folder the paths of the file at `path` are relative to.
fn folder(path: &Path) -> &Path {
    path.parent().unwrap_or(Path::new("."))
}

/// The `[engine]` table of `moat.toml`: the engine's pool limits, moat's defaults where unset.
pub fn read_engine(path: &Path) -> Result<PoolLimits> {
    engine::limits(read_file(path)?.engine, path)
}

/// The `[audit]` table of `moat.toml`, its path resolved against the file's folder.
pub fn read_audit(path: &Path) -> Result<Option<AuditSettings>> {
    Ok(audit::resolved(read_file(path)?.audit, folder(path)))
}

/// The `[auth]`, `[[access]]`, `[quotas]` and `[http]` tables of `moat.toml`, paths resolved
/// against its folder and `${secret:NAME}` taken from `secrets` (a flag's file) or the secrets
/// file the config names.
pub fn read_service(path: &Path, secrets: Option<&Path>) -> Result<Service> {
    let within = || format!("in {}", path.display());
    let base = folder(path);
    let mut file = read_file(path)?;
    let env = |name: &str| std::env::var(name).ok();
    let lookup = Lookup::new(&env, secrets, file.secrets.as_deref(), base).with_context(within)?;
    file.take_service(base, &lookup).with_context(within)
}

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
    plugins::sources(
        file.plugins,
        &file.credentials,
        file.credential_store.as_ref(),
        base,
        &lookup,
    )
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
