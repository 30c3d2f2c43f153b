//! The tables of `moat.toml` for moat as a service shared by many callers: who they are
//! (`[auth]`), what each may use (`[[access]]`), how much (`[quotas]`), and how it is reached
//! (`[http]`).
//!
//! ```toml
//! [auth]
//! resource = "https://tools.example.com/mcp"     # this server, as tokens name it in `aud`
//! api_keys = { ci = "sha256:9f86d0…" }             # `moat auth key ci` makes one
//! [auth.oauth]
//! issuer = "https://id.example.com"
//! scopes = ["mcp:tools"]                          # every token must carry these
//! introspection = { client_id = "moat", client_secret = "${secret:INTROSPECTION}" }
//!
//! [[access]]                  # a caller sees a tool if a rule that matches it allows the
//! group = "eng"               # tool and none denies it; no rules: every tool for everyone
//! allow = ["plugin:notes", "echo_*"]
//! deny = ["notes_delete"]
//!
//! [quotas]
//! requests_per_minute = 600
//! concurrent_calls = 8
//! principals = { "key:ci" = { requests_per_minute = 60 } }
//!
//! [http]
//! hosts = ["tools.example.com"]
//! trusted_proxies = ["127.0.0.1"]
//! tls_cert = "tls/cert.pem"
//! tls_key = "tls/key.pem"
//! request_state_key = "${secret:REQUEST_STATE_KEY}"   # the same for every replica
//! ```

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use schemars::JsonSchema;
use serde::Deserialize;

use crate::access::credentials::parse_hashed;
use crate::access::oauth::{self, introspection, jwks};
use crate::access::quotas::Quota;
use crate::access::tool_sets::{Pattern, Rule, ToolSets, Who};

/// The shortest key that may seal request states (HMAC-SHA256 wants 256 bits).
const MIN_STATE_KEY_BYTES: usize = 32;

/// `[auth]`: how HTTP callers prove who they are. With none of `api_keys` and `oauth`, every
/// request must carry the local token (`token_file`).
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct AuthEntry {
    /// The local bearer token's file, relative to moat.toml; created (mode 0600) when missing.
    /// Default: `$MOAT_TOKEN_FILE`, else `~/.config/moat/http-token`.
    token_file: Option<PathBuf>,
    /// This server's resource identifier, the URL of its `/mcp` endpoint as clients reach it:
    /// access tokens must name it in `aud` (RFC 8707). Default: `http://ADDRESS/mcp` of a
    /// loopback `--http` address (https with TLS).
    #[schemars(regex(pattern = r"^https?://"))]
    resource: Option<String>,
    /// Static API keys for machine clients, by name: each the key's hash, `sha256:` and 64 hex
    /// digits, or `${secret:NAME}` holding one. `moat auth key NAME` makes a key and its hash.
    #[serde(default)]
    #[schemars(extend("propertyNames" = { "pattern": "^[A-Za-z0-9_.-]+$" }))]
    api_keys: BTreeMap<String, String>,
    /// OAuth 2.1 access tokens from an authorization server.
    oauth: Option<OAuthEntry>,
    /// The principal stdio requests act for, as `[[access]]` rules name it. Default: `stdio`.
    stdio_principal: Option<String>,
}

/// `[auth.oauth]`: the authorization server whose access tokens moat accepts.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct OAuthEntry {
    /// The issuer, exactly as its tokens' `iss` names it: https, or http to loopback.
    issuer: String,
    /// Scopes every token must carry; Protected Resource Metadata and 401s name them.
    #[serde(default)]
    scopes: Vec<String>,
    /// The issuer's JWKS, when its metadata does not name one.
    jwks_uri: Option<String>,
    /// Clock skew allowed on `exp` and `nbf`, in seconds.
    #[schemars(extend("default" = 60))]
    leeway_seconds: Option<u64>,
    /// The least time between two fetches of the issuer's keys, in seconds: a token signed by
    /// a key moat does not know makes it fetch them again, at most this often.
    #[schemars(extend("default" = 10))]
    jwks_cooldown_seconds: Option<u64>,
    /// Introspection (RFC 7662) of opaque tokens, as this client of the issuer.
    introspection: Option<IntrospectionEntry>,
    /// moat's client at the issuer for signing browsers in (authorization code with PKCE),
    /// which a consent link made for an OAuth caller needs: the browser that opens it must sign
    /// in as the same principal. Register `…/oauth/signed-in` beside each consent source's
    /// callback as its redirect URI, and let it ask for a token for `resource`.
    sign_in: Option<SignInEntry>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct SignInEntry {
    client_id: String,
    /// Its secret, for a confidential client; `${secret:NAME}` takes it from the secrets file.
    client_secret: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct IntrospectionEntry {
    /// The endpoint, when the issuer's metadata does not name one.
    endpoint: Option<String>,
    client_id: String,
    /// Its secret; `${secret:NAME}` takes it from the secrets file.
    client_secret: String,
    /// How long an answer is trusted, in seconds: a revoked token is refused at most this
    /// late. 0 asks every time.
    #[schemars(extend("default" = 30))]
    cache_seconds: Option<u64>,
    /// Questions a second about tokens moat has no answer for (a second's worth may come at
    /// once); beyond it such a token gets 503 without the issuer being asked, so that made-up
    /// tokens cannot make moat flood it.
    #[schemars(extend("default" = 50), range(min = 1))]
    max_per_second: Option<u32>,
}

/// `[[access]]`: one rule from callers to tools. Every condition given must hold for the rule
/// to match a caller (none: everyone); each is a glob (`*`, `?`).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct AccessEntry {
    /// The principal's name: `key:NAME` (an API key), `local` (the local token), `stdio`, a
    /// token's `sub` (`sub:SUB` when the `sub` has a `:` or is one of those names), else
    /// `client:CLIENT_ID`.
    principal: Option<String>,
    /// An API key's name.
    key: Option<String>,
    /// A token's `sub`.
    subject: Option<String>,
    /// A token's `client_id`.
    client_id: Option<String>,
    /// A scope the token carries.
    scope: Option<String>,
    /// A group (`groups` or `roles` claim) the token names; a claim that is one string is one
    /// group.
    group: Option<String>,
    /// Tools the rule gives, by MCP name (`notes_*`), or whole plugins (`plugin:notes`).
    #[serde(default)]
    allow: Vec<String>,
    /// Tools the rule withholds, whatever other rules give.
    #[serde(default)]
    deny: Vec<String>,
}

/// `[quotas]`: what each principal may ask, separately.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct QuotasEntry {
    /// Requests to `/mcp` per minute and principal; a minute's worth may come at once.
    requests_per_minute: Option<u32>,
    /// `tools/call` requests running at once, per principal.
    concurrent_calls: Option<u32>,
    /// Other quotas for some principals, by name (`"key:ci" = { requests_per_minute = 60 }`).
    #[serde(default)]
    principals: BTreeMap<String, QuotaEntry>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct QuotaEntry {
    requests_per_minute: Option<u32>,
    concurrent_calls: Option<u32>,
}

/// `[http]`: how `moat serve --http` is reached.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct HttpEntry {
    /// `Host` names to accept besides loopback ones (`tools.example.com`, or `host:port`).
    #[serde(default)]
    hosts: Vec<String>,
    /// Browser `Origin`s to accept besides loopback ones (`https://app.example.com`).
    #[serde(default)]
    origins: Vec<String>,
    /// Reverse proxies whose `X-Forwarded-For` names the caller: IP addresses, or CIDR ranges
    /// (`10.0.0.0/8`, a cluster's pod network).
    #[serde(default)]
    trusted_proxies: Vec<String>,
    /// Legacy sessions open at once, at most.
    #[schemars(extend("default" = 1000))]
    max_sessions: Option<usize>,
    /// A legacy session that hears nothing for this many seconds ends.
    #[schemars(extend("default" = 300))]
    session_idle_seconds: Option<u64>,
    /// The TLS certificate chain (PEM), relative to moat.toml; reloaded when it changes.
    tls_cert: Option<PathBuf>,
    /// The TLS private key (PEM).
    tls_key: Option<PathBuf>,
    /// Serve `/metrics` on this address (`HOST:PORT`) without authentication, instead of beside
    /// `/mcp` behind it.
    metrics: Option<SocketAddr>,
    /// The key that seals the `requestState` of 2026-07-28 calls that ask the client
    /// something, at least 32 bytes, usually `${secret:NAME}`: give every moat behind one
    /// address the same, so that a client's next round may reach any of them. Default: a key
    /// made at start, known to this process only.
    request_state_key: Option<String>,
    /// Once moat is told to stop (SIGTERM), how long it goes on serving while `/readyz` answers
    /// 503, so that a load balancer's health checks take it out before it stops taking requests
    /// (calls in flight then finish). Give the balancer's check interval times its fall count.
    #[schemars(extend("default" = 0))]
    drain_seconds: Option<u64>,
    /// Then, how long moat waits at most for the calls and task runs in progress to finish
    /// (new work is refused meanwhile, with a 503 a load balancer may send elsewhere) before it
    /// stops them and exits. Each call ends by its plugin's deadline_ms anyway.
    #[schemars(extend("default" = 30))]
    drain_finish_seconds: Option<u64>,
}

/// `[telemetry]`: traces of tool calls over OTLP/HTTP, off unless an endpoint is given here,
/// by `--otlp-endpoint`, or by `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` / `OTEL_EXPORTER_OTLP_ENDPOINT`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct TelemetryEntry {
    /// The collector: its base URL (`http://127.0.0.1:4318`, to which `/v1/traces` is added)
    /// or the full traces URL.
    #[schemars(regex(pattern = r"^https?://"))]
    otlp_endpoint: Option<String>,
}

/// What these tables say, checked.
#[derive(Clone, Debug, Default)]
pub struct Service {
    pub token_file: Option<PathBuf>,
    pub resource: Option<String>,
    pub api_keys: Vec<(String, [u8; 32])>,
    /// The issuer's settings, but the audience, which comes from the address served.
    pub oauth: Option<oauth::Settings>,
    pub stdio_principal: Option<String>,
    pub rules: Vec<Rule>,
    pub default_quota: Quota,
    pub quotas: HashMap<String, Quota>,
    pub hosts: Vec<String>,
    pub origins: Vec<String>,
    pub trusted_proxies: Vec<ipnet::IpNet>,
    pub max_sessions: Option<usize>,
    pub session_idle: Option<Duration>,
    pub tls: Option<(PathBuf, PathBuf)>,
    pub metrics: Option<SocketAddr>,
    pub otlp_endpoint: Option<String>,
    /// The key request states are sealed with, when moat.toml gives one.
    pub request_state_key: Option<Vec<u8>>,
    /// How long `/readyz` says 503 before moat stops taking requests, once told to stop.
    pub drain: Option<Duration>,
    pub drain_finish: Option<Duration>,
    /// The Redis replicas share state through, when they do.
    pub cluster: Option<crate::cluster::Settings>,
    /// The sources of callers' own credentials for upstreams (`[credentials]`).
    pub credentials: BTreeMap<String, crate::upstream::Source>,
    /// Where callers' consented tokens are kept: the file (or Redis) and the secret of its key.
    pub credential_store: Option<crate::shared::consents::Settings>,
}

impl Service {
    /// The `[[access]]` rules, capped by `denied` (the enterprise policy's `deny_tools`).
    pub fn tool_sets(&self, denied: &[String]) -> ToolSets {
        ToolSets {
            rules: self.rules.clone(),
            denied: denied.iter().map(|p| Pattern::parse(p)).collect(),
        }
    }
}

/// The tables as read, and what expands `${secret:…}` in them.
pub(super) struct Tables<'a> {
    pub auth: Option<AuthEntry>,
    pub access: Vec<AccessEntry>,
    pub quotas: Option<QuotasEntry>,
    pub http: Option<HttpEntry>,
    pub telemetry: Option<TelemetryEntry>,
    pub cluster: Option<super::cluster::ClusterEntry>,
    pub credentials: &'a BTreeMap<String, super::credentials::CredentialsEntry>,
    pub credential_store: Option<&'a super::credentials::StoreEntry>,
    pub base: &'a Path,
    pub expand: &'a dyn Fn(&str) -> Result<String>,
}

pub(super) fn parse(tables: Tables) -> Result<Service> {
    let mut service = Service {
        credentials: super::credentials::sources(tables.credentials, tables.expand)?,
        credential_store: tables
            .credential_store
            .map(|entry| {
                let clustered = tables.cluster.is_some();
                super::credentials::store(entry, tables.base, tables.expand, clustered)
            })
            .transpose()?,
        ..Service::default()
    };
    let auth = tables.auth.unwrap_or_default();
    service.token_file = auth.token_file.map(|f| tables.base.join(f));
    if let Some(resource) = &auth.resource {
        // https, or plain http on loopback: the same rule as for an issuer.
        oauth::check_issuer_url(resource).context("[auth] resource")?;
    }
    service.resource = auth.resource;
    for (name, value) in auth.api_keys {
        let hashed = (tables.expand)(&value).with_context(|| format!("[auth] api_keys.{name}"))?;
        let digest = parse_hashed(&hashed).with_context(|| format!("[auth] api_keys.{name}"))?;
        service.api_keys.push((name, digest));
    }
    if let Some(entry) = auth.oauth {
        service.oauth = Some(oauth_settings(entry, tables.expand).context("in [auth.oauth]")?);
    }
    // A consent link made for an OAuth caller goes on only once the browser signs in as them.
    if let Some(oauth) = &service.oauth
        && oauth.sign_in.is_none()
        && let Some((name, _)) = service
            .credentials
            .iter()
            .find(|(_, s)| s.consent.is_some())
    {
        bail!(
            "[credentials.{name}] asks callers' consent, and OAuth callers prove who opens their \
             link by signing in at {}: give [auth.oauth] sign_in = {{ client_id = \"…\" }}, \
             moat's client there, with …/oauth/signed-in as its redirect URI",
            oauth.issuer
        );
    }
    service.stdio_principal = auth.stdio_principal;
    for (i, entry) in tables.access.into_iter().enumerate() {
        if entry.allow.is_empty() && entry.deny.is_empty() {
            bail!(
                "[[access]] rule {}: give `allow` or `deny` (or both)",
                i + 1
            );
        }
        service.rules.push(Rule {
            who: Who {
                principal: entry.principal,
                key: entry.key,
                subject: entry.subject,
                client_id: entry.client_id,
                scope: entry.scope,
                group: entry.group,
            },
            allow: entry.allow.iter().map(|p| Pattern::parse(p)).collect(),
            deny: entry.deny.iter().map(|p| Pattern::parse(p)).collect(),
        });
    }
    let quotas = tables.quotas.unwrap_or_default();
    service.default_quota = Quota {
        requests_per_minute: quotas.requests_per_minute,
        concurrent_calls: quotas.concurrent_calls,
    };
    for (name, quota) in quotas.principals {
        service.quotas.insert(
            name,
            Quota {
                requests_per_minute: quota.requests_per_minute,
                concurrent_calls: quota.concurrent_calls,
            },
        );
    }
    for quota in service.quotas.values().chain([&service.default_quota]) {
        if quota.requests_per_minute == Some(0) || quota.concurrent_calls == Some(0) {
            bail!("[quotas]: a quota of 0 would refuse everything; leave it out for no limit");
        }
    }
    let http = tables.http.unwrap_or_default();
    service.hosts = http.hosts;
    for origin in &http.origins {
        if !origin.contains("://") {
            bail!("[http] origins: \"{origin}\" needs its scheme (https://{origin})");
        }
    }
    service.origins = http.origins;
    for proxy in &http.trusted_proxies {
        let range = proxy.parse::<ipnet::IpNet>().ok();
        let range = range.or_else(|| proxy.parse::<IpAddr>().ok().map(ipnet::IpNet::from));
        let Some(range) = range else {
            bail!(
                "[http] trusted_proxies: \"{proxy}\" is neither an IP address nor a CIDR range \
                 (such as 10.0.0.0/8)"
            );
        };
        service.trusted_proxies.push(range);
    }
    if http.max_sessions == Some(0) {
        bail!("[http] max_sessions must be at least 1");
    }
    service.max_sessions = http.max_sessions;
    service.session_idle = http.session_idle_seconds.map(Duration::from_secs);
    service.tls = match (http.tls_cert, http.tls_key) {
        (Some(cert), Some(key)) => Some((tables.base.join(cert), tables.base.join(key))),
        (None, None) => None,
        _ => bail!("[http]: give both tls_cert and tls_key, or neither"),
    };
    service.metrics = http.metrics;
    if let Some(key) = &http.request_state_key {
        let key = (tables.expand)(key).context("[http] request_state_key")?;
        if key.len() < MIN_STATE_KEY_BYTES {
            bail!(
                "[http] request_state_key must be at least {MIN_STATE_KEY_BYTES} bytes (it is {}); \
                 `openssl rand -base64 48` makes one",
                key.len()
            );
        }
        service.request_state_key = Some(key.into_bytes());
    }
    service.drain = http.drain_seconds.map(Duration::from_secs);
    service.drain_finish = http.drain_finish_seconds.map(Duration::from_secs);
    service.otlp_endpoint = tables.telemetry.unwrap_or_default().otlp_endpoint;
    if let Some(entry) = tables.cluster {
        service.cluster = Some(super::cluster::parse(entry, tables.expand)?);
        if service.request_state_key.is_none() {
            bail!(
                "[cluster]: the replicas read each other's task records, sealed with a key derived \
                 from [http] request_state_key, and answer each other's 2026-07-28 rounds: give \
                 request_state_key = \"${{secret:NAME}}\" (the same on every replica; `openssl \
                 rand -base64 48` makes one)"
            );
        }
        let consenting = service
            .credentials
            .iter()
            .find(|(_, s)| s.consent.is_some());
        if let (Some((name, _)), None) = (consenting, &service.credential_store) {
            bail!(
                "[credentials.{name}] asks callers' consent, and under [cluster] the tokens it \
                 yields are kept in Redis, sealed: give credential_store = {{ key = \
                 \"${{secret:NAME}}\" }} (at least 32 characters)"
            );
        }
    }
    Ok(service)
}

fn oauth_settings(
    entry: OAuthEntry,
    expand: &dyn Fn(&str) -> Result<String>,
) -> Result<oauth::Settings> {
    oauth::check_issuer_url(&entry.issuer).context("issuer")?;
    let introspection = match entry.introspection {
        Some(i) => Some(introspection::Client {
            endpoint: i.endpoint,
            client_id: i.client_id,
            client_secret: expand(&i.client_secret).context("introspection client_secret")?,
            cache: Duration::from_secs(i.cache_seconds.unwrap_or(30)),
            max_per_second: match i.max_per_second {
                Some(0) => bail!("introspection max_per_second must be at least 1"),
                Some(n) => n,
                None => introspection::DEFAULT_MAX_PER_SECOND,
            },
        }),
        None => None,
    };
    let sign_in = match entry.sign_in {
        Some(s) => Some(oauth::sign_in::Client {
            client_id: s.client_id,
            client_secret: s
                .client_secret
                .as_deref()
                .map(expand)
                .transpose()
                .context("sign_in client_secret")?,
        }),
        None => None,
    };
    Ok(oauth::Settings {
        sign_in,
        issuer: entry.issuer,
        audience: String::new(),
        required_scopes: entry.scopes,
        jwks_uri: entry.jwks_uri,
        introspection,
        leeway: Duration::from_secs(entry.leeway_seconds.unwrap_or(60)),
        jwks_cooldown: entry
            .jwks_cooldown_seconds
            .map_or(jwks::DEFAULT_COOLDOWN, Duration::from_secs),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The service tables of `text`, `${secret:S}` standing for `sha256:` and 64 `a`s.
    fn read(text: &str) -> Result<Service> {
        #[derive(Deserialize)]
        struct Tables {
            auth: Option<AuthEntry>,
            #[serde(default)]
            access: Vec<AccessEntry>,
            quotas: Option<QuotasEntry>,
            http: Option<HttpEntry>,
            telemetry: Option<TelemetryEntry>,
            cluster: Option<super::super::cluster::ClusterEntry>,
            #[serde(default)]
            credentials: BTreeMap<String, super::super::credentials::CredentialsEntry>,
            credential_store: Option<super::super::credentials::StoreEntry>,
        }
        let tables: Tables = toml::from_str(text)?;
        let expand =
            |text: &str| Ok(text.replace("${secret:S}", &format!("sha256:{}", "a".repeat(64))));
        parse(super::Tables {
            auth: tables.auth,
            access: tables.access,
            quotas: tables.quotas,
            http: tables.http,
            telemetry: tables.telemetry,
            cluster: tables.cluster,
            credentials: &tables.credentials,
            credential_store: tables.credential_store.as_ref(),
            base: Path::new("/srv/moat"),
            expand: &expand,
        })
    }

    #[test]
    fn reads_every_table() {
        let service = read(
            r#"
            [auth]
            resource = "https://tools.example.com/mcp"
            api_keys = { ci = "${secret:S}" }
            [auth.oauth]
            issuer = "https://id.example.com"
            scopes = ["tools"]
            [[access]]
            group = "eng"
            allow = ["plugin:notes"]
            deny = ["notes_delete"]
            [quotas]
            requests_per_minute = 600
            principals = { "key:ci" = { concurrent_calls = 2 } }
            [http]
            hosts = ["tools.example.com"]
            tls_cert = "tls/cert.pem"
            tls_key = "tls/key.pem"
            request_state_key = "${secret:S}"
            [telemetry]
            otlp_endpoint = "http://127.0.0.1:4318"
            "#,
        )
        .unwrap();
        let key = format!("sha256:{}", "a".repeat(64)).into_bytes();
        assert_eq!(service.request_state_key, Some(key));
        assert_eq!(service.api_keys, vec![("ci".to_string(), [0xaa; 32])]);
        let oauth = service.oauth.unwrap();
        assert_eq!(oauth.issuer, "https://id.example.com");
        assert_eq!(oauth.jwks_cooldown, jwks::DEFAULT_COOLDOWN);
        assert_eq!(service.rules.len(), 1);
        assert_eq!(service.default_quota.requests_per_minute, Some(600));
        assert_eq!(service.quotas["key:ci"].concurrent_calls, Some(2));
        assert_eq!(
            service.tls,
            Some((
                "/srv/moat/tls/cert.pem".into(),
                "/srv/moat/tls/key.pem".into()
            ))
        );
        assert_eq!(
            service.otlp_endpoint.as_deref(),
            Some("http://127.0.0.1:4318")
        );
    }

    #[test]
    fn a_bad_line_is_a_precise_error() {
        let cases = [
            (
                "[auth]\napi_keys = { ci = \"moat_plain_key\" }",
                "sha256:` and 64 hex digits",
            ),
            (
                "[auth.oauth]\nissuer = \"http://id.example.com\"",
                "plain http only to loopback",
            ),
            (
                "[auth]\nresource = \"http://tools.example.com/mcp\"",
                "must be https://",
            ),
            ("[[access]]\ngroup = \"eng\"", "give `allow` or `deny`"),
            (
                "[[access]]\nteam = \"eng\"\nallow = [\"*\"]",
                "unknown field `team`",
            ),
            (
                "[quotas]\nconcurrent_calls = 0",
                "a quota of 0 would refuse everything",
            ),
            (
                "[http]\ntls_cert = \"c.pem\"",
                "give both tls_cert and tls_key",
            ),
            (
                "[http]\norigins = [\"app.example.com\"]",
                "needs its scheme",
            ),
            (
                "[http]\nrequest_state_key = \"short\"",
                "request_state_key must be at least 32 bytes (it is 5)",
            ),
            (
                "[http]\ntrusted_proxies = [\"10.0.0.0/33\"]",
                "\"10.0.0.0/33\" is neither an IP address nor a CIDR range",
            ),
            (
                "[http]\nmax_sessions = 0",
                "max_sessions must be at least 1",
            ),
        ];
        for (text, expected) in cases {
            let error = format!("{:#}", read(text).unwrap_err());
            assert!(error.contains(expected), "{text}: {error}");
        }
    }

    #[test]
    fn consent_for_oauth_callers_needs_a_client_to_sign_their_browsers_in() {
        const CONSENT: &str = r#"
            [credentials.tracker]
            hosts = ["api.tracker.example"]
            consent = { authorization_endpoint = "https://t.example/auth", token_endpoint = "https://t.example/token", client_id = "moat", redirect_uri = "https://moat.example/oauth/callback/tracker" }
            [auth.oauth]
            issuer = "https://id.example"
        "#;
        let error = format!("{:#}", read(CONSENT).unwrap_err());
        assert!(
            error.contains("give [auth.oauth] sign_in = { client_id"),
            "{error}"
        );
        let signing_in = read(&format!("{CONSENT}sign_in = {{ client_id = \"moat\" }}\n"))
            .unwrap()
            .oauth
            .unwrap();
        assert_eq!(signing_in.sign_in.unwrap().client_id, "moat");
    }

    #[test]
    fn consent_under_cluster_keeps_its_tokens_in_redis_sealed_with_a_key() {
        const CONSENT: &str = r#"
            [credentials.tracker]
            hosts = ["api.tracker.example"]
            consent = { authorization_endpoint = "https://t.example/auth", token_endpoint = "https://t.example/token", client_id = "moat", redirect_uri = "https://moat.example/oauth/callback/tracker" }
        "#;
        const CLUSTER: &str = "[cluster]\nredis = \"redis://127.0.0.1:6379\"\nreplica = \"r1\"\n\
                               [http]\nrequest_state_key = \"0123456789abcdef0123456789abcdef\"\n";
        let key = format!("\"{}\"", "k".repeat(32));
        let error = |text: &str| format!("{:#}", read(text).unwrap_err());
        let unsealed = error(&format!("{CONSENT}\n{CLUSTER}"));
        assert!(
            unsealed.contains("[credentials.tracker] asks callers' consent")
                && unsealed.contains("credential_store = { key"),
            "{unsealed}"
        );
        let both = error(&format!(
            "credential_store = {{ path = \"c.sealed\", key = {key} }}\n{CONSENT}\n{CLUSTER}"
        ));
        assert!(both.contains("drop `path`"), "{both}");
        let nowhere = error(&format!("credential_store = {{ key = {key} }}\n{CONSENT}"));
        assert!(nowhere.contains("names no `path`"), "{nowhere}");
        let shared = read(&format!(
            "credential_store = {{ key = {key} }}\n{CONSENT}\n{CLUSTER}"
        ))
        .unwrap();
        let store = shared.credential_store.unwrap();
        assert_eq!(store.path, None);
        assert!(
            !format!("{store:?}").contains("kkkk"),
            "the key never prints"
        );
    }
}
