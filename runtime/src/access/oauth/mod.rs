//! OAuth 2.1 access tokens, as the MCP authorization spec has a resource server check them:
//! JWTs verified against the issuer's published keys ([`jwks`]), with `iss`, `aud` (this
//! resource, RFC 8707), `exp` and `nbf` checked, and opaque tokens asked about at the issuer's
//! introspection endpoint (RFC 7662, [`introspection`]). The issuer's metadata (RFC 8414, else
//! OpenID discovery) says where both are, and is fetched on first use, so that moat starts while
//! its authorization server is down and recovers when it returns.

pub(crate) mod body;
pub mod claims;
pub mod client;
pub mod introspection;
pub mod jwks;
mod metadata;
pub mod sign_in;
#[cfg(test)]
mod tests;

use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::access::Principal;
use crate::access::oauth::introspection::Introspection;
use crate::access::oauth::jwks::Jwks;
use crate::access::oauth::metadata::{IssuerMetadata, Metadata};

/// How long moat waits for the authorization server: a slow one delays only the requests that
/// need it, and not for long.
pub const ISSUER_TIMEOUT: Duration = Duration::from_secs(5);

/// What the operator configured.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The issuer, exactly as tokens name it in `iss`.
    pub issuer: String,
    /// The resource tokens must be issued for (their `aud`): this server's `/mcp` URL.
    pub audience: String,
    /// Scopes every request's token must carry.
    pub required_scopes: Vec<String>,
    /// The JWKS address, when not the one the issuer's metadata gives.
    pub jwks_uri: Option<String>,
    /// Introspection of opaque tokens: the client moat authenticates as.
    pub introspection: Option<introspection::Client>,
    /// moat's client for signing browsers in (the consent pages).
    pub sign_in: Option<sign_in::Client>,
    /// Clock skew allowed on `exp` and `nbf`.
    pub leeway: Duration,
    /// The least time between two fetches of the issuer's keys, and between a failed fetch of
    /// its metadata and the next.
    pub jwks_cooldown: Duration,
}

/// Why a token is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TokenError {
    /// Not a valid token for this resource; the reason is safe to show (it never quotes the token).
    Invalid(String),
    /// Valid, but without the scopes this resource needs.
    InsufficientScope(Vec<String>),
    /// The authorization server could not be asked (down, slow, answering nonsense).
    Unavailable(String),
}

/// Checks access tokens for one issuer and audience; shared by every request.
pub struct OAuth {
    settings: Settings,
    http: reqwest::Client,
    metadata: IssuerMetadata,
    jwks: Jwks,
    introspection: Introspection,
}

impl OAuth {
    pub fn new(settings: Settings) -> Result<Self> {
        check_issuer_url(&settings.issuer)?;
        if let Some(uri) = &settings.jwks_uri {
            check_issuer_url(uri).context("jwks_uri")?;
        }
        crate::supply::source::install_tls_provider();
        let http = reqwest::Client::builder()
            .user_agent(concat!("moat/", env!("CARGO_PKG_VERSION")))
            .redirect(reqwest::redirect::Policy::none())
            .timeout(ISSUER_TIMEOUT)
            .build()
            .context("setting up the HTTP client for the authorization server")?;
        Ok(Self {
            jwks: Jwks::new(settings.jwks_cooldown),
            metadata: IssuerMetadata::new(settings.jwks_cooldown),
            introspection: Introspection::new(
                settings
                    .introspection
                    .as_ref()
                    .map_or(introspection::DEFAULT_MAX_PER_SECOND, |c| c.max_per_second),
            ),
            settings,
            http,
        })
    }

    /// The issuer whose tokens this accepts.
    pub fn issuer(&self) -> &str {
        &self.settings.issuer
    }

    /// The issuer's metadata, fetched once it is first needed (and again after a failure, at
    /// most once per cooldown).
    async fn metadata(&self) -> Result<&Metadata, TokenError> {
        self.metadata
            .get(&self.http, &self.settings.issuer)
            .await
            .map_err(TokenError::Unavailable)
    }

    /// The principal `token` stands for.
    pub async fn verify(&self, token: &str) -> Result<Principal, TokenError> {
        let claims = if jwks::looks_like_jwt(token) {
            let uri = match &self.settings.jwks_uri {
                Some(uri) => uri.clone(),
                None => self.metadata().await?.jwks_uri.clone().ok_or_else(|| {
                    TokenError::Unavailable(
                        "the issuer's metadata names no jwks_uri; set [auth.oauth] jwks_uri".into(),
                    )
                })?,
            };
            self.jwks
                .verify(&self.http, &uri, token, &self.settings)
                .await?
        } else {
            let Some(client) = &self.settings.introspection else {
                return Err(TokenError::Invalid(
                    "not a JWT, and moat is not configured to introspect opaque tokens".into(),
                ));
            };
            let endpoint = match &client.endpoint {
                Some(endpoint) => endpoint.clone(),
                None => self
                    .metadata()
                    .await?
                    .introspection_endpoint
                    .clone()
                    .ok_or_else(|| {
                        TokenError::Unavailable(
                            "the issuer's metadata names no introspection_endpoint".into(),
                        )
                    })?,
            };
            self.introspection
                .ask(&self.http, &endpoint, client, token, &self.settings)
                .await?
        };
        let principal = claims.principal()?;
        let missing: Vec<String> = self
            .settings
            .required_scopes
            .iter()
            .filter(|s| !principal.scopes.contains(s))
            .cloned()
            .collect();
        if !missing.is_empty() {
            return Err(TokenError::InsufficientScope(missing));
        }
        Ok(principal)
    }
}

/// An authorization server address: https, or plain http to loopback only (tests, a local IdP).
pub fn check_issuer_url(text: &str) -> Result<()> {
    let url = reqwest::Url::parse(text).with_context(|| format!("\"{text}\" is not a URL"))?;
    match url.scheme() {
        "https" => Ok(()),
        "http"
            if url
                .host_str()
                .is_some_and(crate::supply::source::is_loopback) =>
        {
            Ok(())
        }
        _ => bail!("\"{text}\" must be https:// (plain http only to loopback)"),
    }
}
