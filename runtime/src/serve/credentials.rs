//! `[credentials.NAME]`: where a caller's own credential for an upstream comes from, for the
//! `inject` entries that name it (`value = "Bearer ${credential:NAME}"`).
//!
//! ```toml
//! [credentials.tracker]
//! hosts = ["api.tracker.example"]                 # where its credentials may go (https)
//! principals = { "key:ci" = "${secret:CI_TRACKER_TOKEN}" }
//! exchange = { token_endpoint = "https://id.example.com/token", client_id = "moat",
//!              client_secret = "${secret:EXCHANGE}", audience = "https://api.tracker.example" }
//! consent = { authorization_endpoint = "https://tracker.example/oauth/authorize",
//!             token_endpoint = "https://tracker.example/oauth/token", client_id = "moat",
//!             redirect_uri = "https://tools.example.com/oauth/callback/tracker", scope = "read" }
//! ```

use std::collections::{BTreeMap, HashMap};

use anyhow::{Context, Result, bail};
use schemars::JsonSchema;
use serde::Deserialize;

use crate::access::oauth::check_issuer_url;
use crate::sandbox::network::{Injection, NetworkGrant};
use crate::shared::consents;
use crate::upstream::{Secret, Source, consent, exchange};

/// `credential_store`: where callers' consented tokens are kept across restarts.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct StoreEntry {
    /// The file, relative to moat.toml; owner-only, sealed whole. Not under `[cluster]`,
    /// where the tokens are kept in Redis, each sealed with `key`.
    path: Option<std::path::PathBuf>,
    /// The secret its key is derived from, at least 32 characters: `${secret:NAME}`.
    key: String,
}

impl StoreEntry {
    /// The file, as written (relative to moat.toml).
    pub(super) fn path(&self) -> Option<&std::path::Path> {
        self.path.as_deref()
    }
}

/// The store `entry` names: its path (resolved against `base`) and its secret; `clustered`
/// when `[cluster]` keeps the tokens in Redis instead of a file.
pub(super) fn store(
    entry: &StoreEntry,
    base: &std::path::Path,
    expand: &dyn Fn(&str) -> Result<String>,
    clustered: bool,
) -> Result<consents::Settings> {
    let key = expand(&entry.key).context("credential_store key")?;
    // Checked now, so that a short key is a config error, not a failure at the first consent.
    consents::Seal::new(&key)?;
    let path = entry.path.as_ref().map(|p| base.join(p));
    match (&path, clustered) {
        (Some(_), true) => bail!(
            "credential_store: under [cluster] the replicas keep callers' tokens in Redis, each \
             sealed with `key`; drop `path`, which would keep them apart"
        ),
        (None, false) => bail!(
            "credential_store names no `path`: give the file that keeps callers' tokens (or \
             [cluster], whose Redis keeps them)"
        ),
        _ => Ok(consents::Settings { path, key }),
    }
}

/// One source of per-caller credentials.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct CredentialsEntry {
    /// The hosts its credentials may be sent to, as `inject` names them (no scheme: https
    /// only); every `inject` entry using this source must go to one of them.
    #[schemars(length(min = 1))]
    hosts: Vec<String>,
    /// A fixed credential for each principal named (`key:ci`, `stdio`, a token's `sub`), from
    /// the secrets file: `{ "key:ci" = "${secret:CI_TRACKER_TOKEN}" }`. Asked first.
    #[serde(default)]
    principals: BTreeMap<String, String>,
    /// Token exchange (RFC 8693): the caller's OAuth access token traded for one meant for
    /// the upstream, as moat's own client of the authorization server.
    exchange: Option<ExchangeEntry>,
    /// The caller's own consent at the upstream's authorization server (authorization code
    /// with PKCE): asked for with a URL elicitation when the caller has no token yet, kept and
    /// refreshed after. Asked last.
    consent: Option<ConsentEntry>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ConsentEntry {
    /// Where the caller is sent to consent: https, or http to loopback.
    authorization_endpoint: String,
    /// Where moat trades the code for tokens: https, or http to loopback.
    token_endpoint: String,
    client_id: String,
    /// Its secret, for a confidential client; `${secret:NAME}` takes it from the secrets file.
    client_secret: Option<String>,
    /// moat's callback for this source as the caller's browser reaches it, ending in
    /// `/oauth/callback/NAME` (each source has its own, so that one authorization server cannot
    /// answer for another's), and as registered with the authorization server; for a stdio
    /// moat, a loopback address (`http://127.0.0.1:8765/oauth/callback/NAME`) it listens on
    /// when a call needs it. Over HTTP, moat's consent pages are served beside it
    /// (`…/oauth/consent/…`, `…/oauth/signed-in`).
    #[schemars(regex(pattern = r"^https?://[^/]+(/.*)?/oauth/callback/[^/]+$"))]
    redirect_uri: String,
    /// The scopes to ask for, space-separated.
    scope: Option<String>,
    /// The upstream's URL, for tokens meant for it (RFC 8707).
    resource: Option<String>,
    /// The authorization server's issuer, when it names itself in its answers (`iss`, RFC
    /// 9207, as its metadata's `authorization_response_iss_parameter_supported` says): an
    /// answer naming another, or none, connects no one.
    issuer: Option<String>,
    /// Connect callers no browser can prove (API keys, the local token): the link's page names
    /// the principal and the source and connects only once confirmed. Without it such
    /// callers get a tool error (OAuth callers sign in again in the browser instead).
    #[serde(default)]
    confirm_unproven: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ExchangeEntry {
    /// The authorization server's token endpoint: https, or http to loopback.
    token_endpoint: String,
    client_id: String,
    /// Its secret; `${secret:NAME}` takes it from the secrets file.
    client_secret: String,
    /// The upstream as the authorization server names it (`audience`).
    audience: Option<String>,
    /// The upstream's URL (`resource`, RFC 8707).
    resource: Option<String>,
    /// The scopes to ask for, space-separated.
    scope: Option<String>,
}

/// The sources of `entries`, `${secret:NAME}` and `${env:NAME}` replaced by `expand`.
pub(super) fn sources(
    entries: &BTreeMap<String, CredentialsEntry>,
    expand: &dyn Fn(&str) -> Result<String>,
) -> Result<BTreeMap<String, Source>> {
    entries
        .iter()
        .map(|(name, entry)| {
            let source =
                source(name, entry, expand).with_context(|| format!("in [credentials.{name}]"))?;
            Ok((name.clone(), source))
        })
        .collect()
}

fn source(
    name: &str,
    entry: &CredentialsEntry,
    expand: &dyn Fn(&str) -> Result<String>,
) -> Result<Source> {
    if entry.hosts.is_empty() {
        bail!("`hosts` is empty, so its credentials could go nowhere");
    }
    let hosts = entry
        .hosts
        .iter()
        .map(|h| Injection::target(h).with_context(|| format!("host \"{h}\"")))
        .collect::<Result<Vec<NetworkGrant>>>()?;
    let mut principals = HashMap::new();
    for (principal, value) in &entry.principals {
        // The error must not quote the value: it may hold a secret.
        let value = expand(value).with_context(|| format!("principals \"{principal}\""))?;
        if value.is_empty() {
            bail!("principals \"{principal}\": the credential is empty");
        }
        principals.insert(principal.clone(), Secret(value));
    }
    let exchange = match &entry.exchange {
        Some(e) => {
            check_issuer_url(&e.token_endpoint).context("exchange token_endpoint")?;
            if e.audience.is_none() && e.resource.is_none() {
                bail!(
                    "exchange names neither `audience` nor `resource`: the exchanged token must \
                     be meant for the upstream, not usable anywhere"
                );
            }
            Some(exchange::Settings {
                token_endpoint: e.token_endpoint.clone(),
                client_id: e.client_id.clone(),
                client_secret: expand(&e.client_secret).context("exchange client_secret")?,
                audience: e.audience.clone(),
                resource: e.resource.clone(),
                scope: e.scope.clone(),
            })
        }
        None => None,
    };
    let consent = match &entry.consent {
        Some(c) => {
            check_issuer_url(&c.authorization_endpoint)
                .context("consent authorization_endpoint")?;
            check_issuer_url(&c.token_endpoint).context("consent token_endpoint")?;
            let redirect = reqwest::Url::parse(&c.redirect_uri).with_context(|| {
                format!("consent redirect_uri \"{}\" is not a URL", c.redirect_uri)
            })?;
            let own = format!("/oauth/callback/{name}");
            if !redirect.path().ends_with(&own) || redirect.query().is_some() {
                bail!(
                    "consent redirect_uri \"{}\" must end in {own}, the callback moat keeps for \
                     this source alone (so that another source's authorization server cannot \
                     answer for it)",
                    c.redirect_uri
                );
            }
            if let Some(issuer) = &c.issuer {
                check_issuer_url(issuer).context("consent issuer")?;
            }
            Some(consent::Settings {
                authorization_endpoint: c.authorization_endpoint.clone(),
                token_endpoint: c.token_endpoint.clone(),
                client_id: c.client_id.clone(),
                client_secret: c
                    .client_secret
                    .as_deref()
                    .map(expand)
                    .transpose()
                    .context("consent client_secret")?,
                scope: c.scope.clone(),
                resource: c.resource.clone(),
                redirect_uri: c.redirect_uri.clone(),
                issuer: c.issuer.clone(),
                confirm_unproven: c.confirm_unproven,
            })
        }
        None => None,
    };
    if principals.is_empty() && exchange.is_none() && consent.is_none() {
        bail!(
            "give `principals`, `exchange` or `consent`: as it is, no caller would get a credential"
        );
    }
    Ok(Source {
        hosts,
        principals,
        exchange,
        consent,
    })
}

/// An `inject` value naming a source: what comes before `${credential:NAME}`, the name, and
/// what comes after; `None` when it names none.
pub(super) fn credential_reference(value: &str) -> Result<Option<(&str, &str, &str)>> {
    const OPEN: &str = "${credential:";
    let Some(start) = value.find(OPEN) else {
        return Ok(None);
    };
    let rest = &value[start + OPEN.len()..];
    let end = rest.find('}').context("`${credential:` without `}`")?;
    let (name, after) = (&rest[..end], &rest[end + 1..]);
    if name.is_empty() {
        bail!("`${{credential:}}` names no source");
    }
    if after.contains(OPEN) {
        bail!("a value may name one credential only");
    }
    Ok(Some((&value[..start], name, after)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<BTreeMap<String, Source>> {
        #[derive(Deserialize)]
        struct File {
            credentials: BTreeMap<String, CredentialsEntry>,
        }
        let file: File = toml::from_str(text)?;
        sources(&file.credentials, &|text| {
            Ok(text.replace("${secret:CI}", "ci-token"))
        })
    }

    #[test]
    fn a_source_reads_its_hosts_principals_and_exchange() {
        let sources = parse(
            r#"
            [credentials.tracker]
            hosts = ["api.tracker.example", "http://127.0.0.1:9300"]
            principals = { "key:ci" = "${secret:CI}" }
            exchange = { token_endpoint = "http://127.0.0.1:9/token", client_id = "moat", client_secret = "s", audience = "tracker" }
            "#,
        )
        .unwrap();
        let tracker = &sources["tracker"];
        assert_eq!(tracker.hosts.len(), 2);
        assert_eq!(tracker.principals["key:ci"], Secret("ci-token".into()));
        assert_eq!(
            tracker.exchange.as_ref().unwrap().audience.as_deref(),
            Some("tracker")
        );
        assert!(!format!("{tracker:?}").contains("ci-token"));
    }

    #[test]
    fn a_source_that_could_serve_no_one_or_anywhere_is_refused() {
        let error = |text: &str| format!("{:#}", parse(text).unwrap_err());
        let none = error("[credentials.t]\nhosts = [\"a.example\"]\n");
        assert!(none.contains("no caller would get a credential"), "{none}");
        let nowhere = error("[credentials.t]\nhosts = []\nprincipals = { stdio = \"x\" }\n");
        assert!(nowhere.contains("could go nowhere"), "{nowhere}");
        let unbound = error(
            "[credentials.t]\nhosts = [\"a.example\"]\n\
             exchange = { token_endpoint = \"http://127.0.0.1:9/t\", client_id = \"m\", client_secret = \"s\" }\n",
        );
        assert!(
            unbound.contains("neither `audience` nor `resource`"),
            "{unbound}"
        );
        let clear = error(
            "[credentials.t]\nhosts = [\"a.example\"]\n\
             exchange = { token_endpoint = \"http://id.example/t\", client_id = \"m\", client_secret = \"s\", audience = \"a\" }\n",
        );
        assert!(clear.contains("plain http only to loopback"), "{clear}");
    }

    #[test]
    fn each_source_s_consent_comes_back_to_its_own_callback() {
        let consent = |redirect: &str| {
            parse(&format!(
                "[credentials.tracker]\nhosts = [\"a.example\"]\n\
                 consent = {{ authorization_endpoint = \"https://id.example/auth\", \
                 token_endpoint = \"https://id.example/token\", client_id = \"m\", \
                 redirect_uri = \"{redirect}\", issuer = \"https://id.example\" }}\n"
            ))
            .map_err(|e| format!("{e:#}"))
        };
        let sources = consent("https://tools.example/x/oauth/callback/tracker").unwrap();
        let settings = sources["tracker"].consent.as_ref().unwrap();
        assert_eq!(settings.base(), "https://tools.example/x");
        assert_eq!(settings.issuer.as_deref(), Some("https://id.example"));
        assert!(!settings.confirm_unproven);
        for shared in [
            "https://tools.example/oauth/callback",
            "https://tools.example/oauth/callback/wiki",
            "https://tools.example/oauth/callback/tracker?x=1",
        ] {
            let why = consent(shared).unwrap_err();
            assert!(why.contains("must end in /oauth/callback/tracker"), "{why}");
        }
    }

    #[test]
    fn an_inject_value_names_at_most_one_credential() {
        assert_eq!(
            credential_reference("Bearer ${credential:tracker}").unwrap(),
            Some(("Bearer ", "tracker", ""))
        );
        assert_eq!(credential_reference("Bearer ${secret:T}").unwrap(), None);
        assert!(credential_reference("${credential:a}${credential:b}").is_err());
        assert!(credential_reference("${credential:}").is_err());
        assert!(credential_reference("${credential:a").is_err());
    }
}
