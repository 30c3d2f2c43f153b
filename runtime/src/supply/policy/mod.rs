//! The enterprise policy: an administrator's file that the operator's `moat.toml` cannot
//! override. It says which plugins may load (by digest, publisher key or name), whether they
//! must be signed, how far any grant may reach, and which transports moat may serve.
//!
//! ```toml
//! require_signatures = true
//! require_manifest = false
//! transports = ["stdio", "http"]
//! http_bind = ["127.0.0.1", "[::1]:8080"]   # an address alone allows any port
//! http_require_auth = true   # `moat serve --http --no-auth` is refused
//! deny_tools = ["*_delete", "plugin:shell"]  # no caller gets these, whatever moat.toml says
//! credential_sources = ["github", "jira-*"]   # the only [credentials] sources moat.toml may name
//! require_token_exchange = true   # callers' upstream credentials come from the IdP's token
//!                                 # exchange, never from fixed secrets or a third party's consent
//! cedar = ["policies/enterprise.cedar"]   # Cedar policies whose forbids moat.toml cannot lift
//! cedar_claims = { department = "String" }   # token claims they read
//!
//! [publishers]
//! acme = "RWQf6LRCGA9i53mlYecO4IzT51TGPpvWucNSCh1CBM0QTaLn73Y7GFO3"   # minisign public key
//!
//! [[allow]]                  # a plugin loads only if one rule matches it; every key given must
//! publisher = "acme"         # hold (publisher, sha256 = "…", name = "text*")
//!
//! [ceiling]                  # the most any grant may reach
//! max_memory_mb = 128
//! deadline_ms = 10000
//! directories = [{ path = "/srv/moat", mode = "rw" }]
//! env = ["LANG", "NOTES_*"]
//! config = ["api-url"]       # wasi:config/store keys
//! network = ["*.example.org"]
//! ```
//!
//! Fail closed: a malformed policy stops moat, a plugin no rule allows does not load, and an
//! absent ceiling key means "no ceiling" only because the key was left out on purpose. A plugin's
//! effective grant is what it asks for (its [`Manifest`]), cut down to what the operator granted,
//! cut down to the ceiling; every cut is reported with its reason.

use std::net::{IpAddr, SocketAddr};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde::Deserialize;

use crate::sandbox::network::NetworkGrant;
use crate::supply::PluginSource;
use crate::supply::manifest::{self, Mode};
use crate::supply::signing::{self, SignatureError, TrustedKey};
use crate::supply::source::Fetched;

mod effective;

pub use effective::{Admitted, Fate, Note, admit, effective, narrow_network};
use effective::{intersect, narrower_of_each};

/// Where an administrator puts the policy; when present it is always in force.
pub const SYSTEM_POLICY: &str = "/etc/moat/policy.toml";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    #[serde(default)]
    require_signatures: bool,
    #[serde(default)]
    require_manifest: bool,
    transports: Option<Vec<Transport>>,
    http_bind: Option<Vec<String>>,
    #[serde(default)]
    http_require_auth: bool,
    #[serde(default)]
    deny_tools: Vec<String>,
    credential_sources: Option<Vec<String>>,
    #[serde(default)]
    require_token_exchange: bool,
    #[serde(default)]
    cedar: Vec<PathBuf>,
    #[serde(default)]
    cedar_claims: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    publishers: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    allow: Vec<AllowRuleFile>,
    #[serde(default)]
    ceiling: CeilingFile,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AllowRuleFile {
    name: Option<String>,
    sha256: Option<String>,
    publisher: Option<String>,
    ceiling: Option<CeilingFile>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct CeilingFile {
    max_memory_mb: Option<usize>,
    deadline_ms: Option<u64>,
    directories: Option<Vec<DirCeiling>>,
    env: Option<Vec<String>>,
    config: Option<Vec<String>>,
    network: Option<Vec<NetworkGrant>>,
}

/// Which plugins may load: every condition given must hold.
#[derive(Clone, Debug, Default)]
pub struct AllowRule {
    /// A plugin name pattern (`*` matches any run of characters).
    pub name: Option<String>,
    /// The sha256 of the component, in hex (a `sha256:` prefix is allowed).
    pub sha256: Option<String>,
    /// A publisher of `[publishers]` whose valid signature the plugin must carry.
    pub publisher: Option<String>,
    /// Ceilings for the plugins this rule admits, on top of the policy's `[ceiling]`.
    pub ceiling: Option<Ceiling>,
}

/// A transport moat may serve.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    Stdio,
    Http,
}

impl std::fmt::Display for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Transport::Stdio => "stdio",
            Transport::Http => "HTTP",
        })
    }
}

/// A host directory under which grants may lie, and the widest mode they may have there.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DirCeiling {
    pub path: PathBuf,
    pub mode: Mode,
}

impl CeilingFile {
    /// The ceiling this table (`what`, for messages) describes.
    fn parse(self, what: &str) -> Result<Ceiling> {
        let directories = self
            .directories
            .map(|dirs| {
                dirs.into_iter()
                    .map(|mut dir| {
                        if !dir.path.is_absolute() {
                            bail!("{what}: directory {} must be absolute", dir.path.display());
                        }
                        // Grants are canonical; compare like with like where the folder exists.
                        if let Ok(canonical) = dir.path.canonicalize() {
                            dir.path = canonical;
                        }
                        Ok(dir)
                    })
                    .collect::<Result<Vec<_>>>()
            })
            .transpose()?;
        Ok(Ceiling {
            max_memory_bytes: crate::sandbox::limits::in_bytes(
                self.max_memory_mb,
                20,
                &format!("{what} max_memory_mb"),
            )?,
            deadline: self.deadline_ms.map(Duration::from_millis),
            directories,
            env: self.env,
            config: self.config,
            network: self.network,
        })
    }
}

/// The ceilings on grants; `None` is no ceiling, an empty list allows nothing.
#[derive(Clone, Debug, Default)]
pub struct Ceiling {
    pub max_memory_bytes: Option<usize>,
    pub deadline: Option<Duration>,
    pub directories: Option<Vec<DirCeiling>>,
    pub env: Option<Vec<String>>,
    /// Patterns of the `wasi:config/store` keys a plugin may be given.
    pub config: Option<Vec<String>>,
    pub network: Option<Vec<NetworkGrant>>,
}

impl Ceiling {
    /// What both ceilings allow.
    pub fn and(&self, other: &Ceiling) -> Ceiling {
        fn both<T: Clone>(a: &Option<T>, b: &Option<T>, meet: impl Fn(&T, &T) -> T) -> Option<T> {
            match (a, b) {
                (Some(a), Some(b)) => Some(meet(a, b)),
                (a, b) => a.clone().or_else(|| b.clone()),
            }
        }
        Ceiling {
            max_memory_bytes: both(&self.max_memory_bytes, &other.max_memory_bytes, |a, b| {
                *a.min(b)
            }),
            deadline: both(&self.deadline, &other.deadline, |a, b| *a.min(b)),
            directories: both(&self.directories, &other.directories, |a, b| {
                // Where one folder lies within the other, the deeper one with the narrower mode.
                let mut out = Vec::new();
                for x in a {
                    for y in b {
                        let path = if x.path.starts_with(&y.path) {
                            &x.path
                        } else if y.path.starts_with(&x.path) {
                            &y.path
                        } else {
                            continue;
                        };
                        let dir = DirCeiling {
                            path: path.clone(),
                            mode: x.mode.min(y.mode),
                        };
                        if !out.contains(&dir) {
                            out.push(dir);
                        }
                    }
                }
                out
            }),
            // Patterns of one that a pattern of the other covers: never wider than both (two
            // patterns that only overlap, like `A*` and `*B`, allow nothing).
            env: both(&self.env, &other.env, |a, b| {
                narrower_of_each(a, b, |wide, narrow| glob_match(wide, narrow))
            }),
            config: both(&self.config, &other.config, |a, b| {
                narrower_of_each(a, b, |wide, narrow| glob_match(wide, narrow))
            }),
            network: both(&self.network, &other.network, |a, b| intersect(a, b)),
        }
    }
}

/// A policy in force. [`Policy::none`] is what applies without a policy file.
#[derive(Clone, Debug, Default)]
pub struct Policy {
    /// The file it came from, for messages; `None` for no policy.
    pub source: Option<PathBuf>,
    pub require_signatures: bool,
    pub require_manifest: bool,
    pub transports: Option<Vec<Transport>>,
    http_bind: Option<Vec<(IpAddr, Option<u16>)>>,
    /// Whether HTTP must authenticate its callers (no `--no-auth`).
    pub http_require_auth: bool,
    /// Tools no caller gets, by MCP name glob or `plugin:NAME` (tool-set patterns).
    pub deny_tools: Vec<String>,
    /// The `[credentials]` sources moat.toml may name (globs); `None`: any.
    pub credential_sources: Option<Vec<String>>,
    /// Whether callers' upstream credentials must come from token exchange only.
    pub require_token_exchange: bool,
    /// Cedar policy files over every call and request (see `crate::policy`), that moat.toml's
    /// policies cannot lift; relative paths are resolved against the policy file's folder.
    pub cedar: Vec<PathBuf>,
    /// The token claims those policies may read, with their Cedar types.
    pub cedar_claims: std::collections::BTreeMap<String, String>,
    pub publishers: Vec<TrustedKey>,
    /// `None` without a policy file: every plugin may load.
    pub allow: Option<Vec<AllowRule>>,
    pub ceiling: Ceiling,
}

impl Policy {
    /// No policy: every plugin loads, nothing is capped beyond the operator's config.
    pub fn none() -> Self {
        Self::default()
    }

    /// The policy in force: the system policy when it exists (and then `--policy` may only name
    /// that same file), else the one named by `--policy`, else none.
    pub fn resolve(explicit: Option<&Path>) -> Result<Self> {
        Self::resolve_with(Path::new(SYSTEM_POLICY), explicit)
    }

    /// [`Policy::resolve`] with the system policy at `system`.
    fn resolve_with(system: &Path, explicit: Option<&Path>) -> Result<Self> {
        if is_present(system)? {
            if let Some(path) = explicit
                && std::fs::canonicalize(path).ok() != std::fs::canonicalize(system).ok()
            {
                bail!(
                    "the system policy {} is in force; --policy {} cannot replace it",
                    system.display(),
                    path.display()
                );
            }
            return Self::read(system);
        }
        explicit.map_or_else(|| Ok(Self::none()), Self::read)
    }

    /// Reads a policy file. Any error (unknown key, bad key, a file others may write) is fatal.
    pub fn read(path: &Path) -> Result<Self> {
        let meta =
            std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
        if meta.permissions().mode() & 0o022 != 0 {
            bail!(
                "the policy {} is writable by others than its owner; it must not be",
                path.display()
            );
        }
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let mut policy =
            Self::parse(&text).with_context(|| format!("in the policy {}", path.display()))?;
        let folder = path.parent().unwrap_or(Path::new("."));
        policy.cedar = policy.cedar.iter().map(|p| folder.join(p)).collect();
        policy.source = Some(path.to_path_buf());
        Ok(policy)
    }

    /// Parses a policy's text.
    pub fn parse(text: &str) -> Result<Self> {
        let file: PolicyFile = toml::from_str(text)?;
        let publishers = file
            .publishers
            .iter()
            .map(|(name, key)| TrustedKey::parse(name, key))
            .collect::<Result<Vec<_>>>()?;
        for (index, rule) in file.allow.iter().enumerate() {
            let n = index + 1;
            if rule.name.is_none() && rule.sha256.is_none() && rule.publisher.is_none() {
                bail!(
                    "[[allow]] rule {n} names no condition; write name = \"*\" to allow any plugin"
                );
            }
            if let Some(p) = &rule.publisher
                && !file.publishers.contains_key(p)
            {
                bail!("[[allow]] rule {n} names publisher \"{p}\", which [publishers] lacks");
            }
            if let Some(digest) = &rule.sha256 {
                let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
                if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                    bail!("[[allow]] rule {n}: sha256 \"{digest}\" is not 64 hex digits");
                }
            }
        }
        let allow = file
            .allow
            .into_iter()
            .enumerate()
            .map(|(index, rule)| {
                let what = format!("[[allow]] rule {} ceiling", index + 1);
                Ok(AllowRule {
                    name: rule.name,
                    sha256: rule.sha256,
                    publisher: rule.publisher,
                    ceiling: rule.ceiling.map(|c| c.parse(&what)).transpose()?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let http_bind = file
            .http_bind
            .map(|binds| {
                binds
                    .iter()
                    .map(|b| parse_bind(b))
                    .collect::<Result<Vec<_>>>()
            })
            .transpose()?;
        Ok(Self {
            source: None,
            require_signatures: file.require_signatures,
            require_manifest: file.require_manifest,
            transports: file.transports,
            http_bind,
            http_require_auth: file.http_require_auth,
            deny_tools: file.deny_tools,
            credential_sources: file.credential_sources,
            require_token_exchange: file.require_token_exchange,
            cedar: file.cedar,
            cedar_claims: file.cedar_claims,
            publishers,
            allow: Some(allow),
            ceiling: file.ceiling.parse("[ceiling]")?,
        })
    }

    fn name(&self) -> String {
        match &self.source {
            Some(path) => format!("the policy {}", path.display()),
            None => "the policy".into(),
        }
    }

    /// Refuses a `[credentials]` source the policy does not allow: one `credential_sources` does
    /// not name, or one that gives credentials otherwise than by token exchange (`otherwise`:
    /// `principals`, `consent`) when the policy requires token exchange.
    pub fn check_credential_source(&self, name: &str, otherwise: &[&str]) -> Result<()> {
        if let Some(allowed) = &self.credential_sources
            && !allowed.iter().any(|pattern| glob_match(pattern, name))
        {
            bail!(
                "{} does not allow the credential source \"{name}\" (its credential_sources \
                 are {})",
                self.name(),
                match allowed.is_empty() {
                    true => "empty".to_string(),
                    false => allowed.join(", "),
                }
            );
        }
        if self.require_token_exchange && !otherwise.is_empty() {
            bail!(
                "{} requires token exchange for callers' upstream credentials, and the credential \
                 source \"{name}\" also gives them by {}; remove it",
                self.name(),
                otherwise
                    .iter()
                    .map(|way| format!("`{way}`"))
                    .collect::<Vec<_>>()
                    .join(" and ")
            );
        }
        Ok(())
    }

    /// Refuses a transport the policy does not allow.
    pub fn check_transport(&self, transport: Transport, addr: Option<SocketAddr>) -> Result<()> {
        if let Some(allowed) = &self.transports
            && !allowed.contains(&transport)
        {
            bail!("{} does not allow serving over {transport}", self.name());
        }
        if let (Some(binds), Some(addr)) = (&self.http_bind, addr)
            && !binds
                .iter()
                .any(|(ip, port)| *ip == addr.ip() && port.is_none_or(|p| p == addr.port()))
        {
            bail!("{} does not allow binding {addr}", self.name());
        }
        Ok(())
    }

    /// Refuses HTTP without authentication when the policy requires it.
    pub fn check_no_auth(&self) -> Result<()> {
        if self.http_require_auth {
            bail!(
                "{} requires authentication on HTTP (http_require_auth); --no-auth is refused",
                self.name()
            );
        }
        Ok(())
    }

    /// Decides whether the plugin `source`, whose bytes, digest and signature (if it came with
    /// one) are `component`, may load, and with what.
    pub fn admit(&self, source: &PluginSource, component: &Fetched) -> Result<Admitted> {
        let wasm = &component.wasm[..];
        let digest = component.digest.to_string();
        let publisher = self.publisher(wasm, component.signature.as_deref())?;
        let mut allowed_by = "default (no policy is in force)".to_string();
        let mut ceiling = self.ceiling.clone();
        if let Some(rules) = &self.allow {
            let why_not: Vec<String> = rules
                .iter()
                .enumerate()
                .filter_map(|(i, rule)| {
                    rule_mismatch(rule, &source.name, &digest, publisher.as_deref())
                        .map(|why| format!("rule {}: {why}", i + 1))
                })
                .collect();
            if why_not.len() == rules.len() {
                if rules.is_empty() {
                    bail!(
                        "{} has no [[allow]] rule, so it allows no plugin",
                        self.name()
                    );
                }
                bail!(
                    "{} allows no plugin like this one ({}; {digest}): {}",
                    self.name(),
                    source.name,
                    why_not.join("; ")
                );
            }
            let matched = (0..rules.len())
                .find(|&i| {
                    rule_mismatch(&rules[i], &source.name, &digest, publisher.as_deref()).is_none()
                })
                .expect("some rule matched");
            allowed_by = format!("[[allow]] rule {} of {}", matched + 1, self.name());
            if let Some(rule_ceiling) = &rules[matched].ceiling {
                ceiling = ceiling.and(rule_ceiling);
            }
        }
        let manifest = manifest::read(wasm)?;
        if self.require_manifest && manifest.is_none() {
            bail!(
                "{} requires a permission manifest, and the component has no `{}` section",
                self.name(),
                manifest::MANIFEST_SECTION
            );
        }
        let (limits, grants, notes) =
            effective(manifest.as_ref(), &source.limits, &source.grants, &ceiling);
        Ok(Admitted {
            digest,
            publisher,
            allowed_by,
            manifest,
            notes,
            limits,
            grants,
        })
    }

    /// The publisher whose signature the plugin carries; an error when a signature is required
    /// and missing, or present but not valid.
    fn publisher(&self, wasm: &[u8], signature: Option<&str>) -> Result<Option<String>> {
        let names = || {
            let names: Vec<&str> = self
                .publishers
                .iter()
                .map(|k| k.publisher.as_str())
                .collect();
            names.join(", ")
        };
        let Some(signature) = signature else {
            if self.require_signatures {
                bail!(
                    "{} requires a signature by one of its publishers ({}), and the plugin is unsigned",
                    self.name(),
                    names()
                );
            }
            return Ok(None);
        };
        if self.publishers.is_empty() && !self.require_signatures {
            return Ok(None);
        }
        match signing::verify(wasm, signature, &self.publishers) {
            Ok(key) => Ok(Some(key.publisher.clone())),
            Err(e @ SignatureError::UnknownKey { .. }) if !self.require_signatures => {
                tracing::warn!("{e}; loading it as unsigned");
                Ok(None)
            }
            Err(e) => bail!("refused by {}: {e}", self.name()),
        }
    }
}

/// Whether the system policy is there. Only "not found" means it is absent: any other error
/// (a folder moat may not search, a path through a file) leaves it unknown, and moat must not
/// run unrestricted on a guess.
fn is_present(system: &Path) -> Result<bool> {
    match std::fs::metadata(system) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e).with_context(|| {
            format!(
                "cannot tell whether the system policy {} is in force; moat does not start \
                 until it can read it (or it is gone)",
                system.display()
            )
        }),
    }
}

/// Why `rule` does not match a plugin, or `None` when it does.
fn rule_mismatch(
    rule: &AllowRule,
    name: &str,
    digest: &str,
    publisher: Option<&str>,
) -> Option<String> {
    let mut why = Vec::new();
    if let Some(pattern) = &rule.name
        && !glob_match(pattern, name)
    {
        why.push(format!("name is not \"{pattern}\""));
    }
    if let Some(wanted) = &rule.sha256 {
        let wanted = wanted.strip_prefix("sha256:").unwrap_or(wanted);
        if !digest.ends_with(&wanted.to_ascii_lowercase()) {
            why.push(format!("digest is not sha256:{wanted}"));
        }
    }
    if let Some(wanted) = &rule.publisher
        && publisher != Some(wanted.as_str())
    {
        why.push(format!("not signed by \"{wanted}\""));
    }
    (!why.is_empty()).then(|| why.join(", "))
}

/// `*` matches any run of characters; everything else matches itself.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == text,
        Some((head, tail)) => {
            let Some(rest) = text.strip_prefix(head) else {
                return false;
            };
            (0..=rest.len())
                .filter(|&i| rest.is_char_boundary(i))
                .any(|i| glob_match(tail, &rest[i..]))
        }
    }
}

/// Whether guest path `path` is `dir` or beneath it.
fn guest_within(path: &str, dir: &str) -> bool {
    Path::new(path).starts_with(Path::new(dir))
}

fn parse_bind(text: &str) -> Result<(IpAddr, Option<u16>)> {
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Ok((addr.ip(), Some(addr.port())));
    }
    let ip = text.trim_start_matches('[').trim_end_matches(']');
    let ip = ip
        .parse()
        .with_context(|| format!("http_bind \"{text}\" is neither an address nor address:port"))?;
    Ok((ip, None))
}

#[cfg(test)]
mod tests;
