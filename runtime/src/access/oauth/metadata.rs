//! The authorization server's metadata: RFC 8414 `/.well-known/oauth-authorization-server`,
//! else OpenID Connect discovery, whose `issuer` must be the one configured (RFC 8414 §3.3).
//! It is fetched once it is first needed and kept; after a failed fetch the next waits a
//! cooldown, so that while the issuer is down a request costs it nothing (nor waits on it).

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::Deserialize;
use tokio::sync::Mutex;

use crate::access::oauth::body::read_capped;

/// The metadata once fetched, and the last failure to fetch it.
pub struct IssuerMetadata {
    fetched: OnceLock<Metadata>,
    /// When the last fetch failed, and why; held by the one request fetching.
    last_failure: Mutex<Option<(Instant, String)>>,
    /// The least time between a failed fetch and the next.
    cooldown: Duration,
}

impl IssuerMetadata {
    pub fn new(cooldown: Duration) -> Self {
        Self {
            fetched: OnceLock::new(),
            last_failure: Mutex::new(None),
            cooldown,
        }
    }

    /// The issuer's metadata: fetched if no fetch has succeeded yet, unless the last one failed
    /// less than the cooldown ago (then its failure stands).
    pub async fn get(&self, http: &reqwest::Client, issuer: &str) -> Result<&Metadata, String> {
        if let Some(metadata) = self.fetched.get() {
            return Ok(metadata);
        }
        let mut last_failure = self.last_failure.lock().await;
        // Another request may have fetched it while this one waited.
        if let Some(metadata) = self.fetched.get() {
            return Ok(metadata);
        }
        if let Some((at, why)) = &*last_failure
            && at.elapsed() < self.cooldown
        {
            return Err(why.clone());
        }
        match Metadata::fetch(http, issuer).await {
            Ok(metadata) => Ok(self.fetched.get_or_init(|| metadata)),
            Err(error) => {
                let why = format!("{error:#}");
                tracing::warn!("{why}");
                *last_failure = Some((Instant::now(), why.clone()));
                Err(why)
            }
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
pub struct Metadata {
    pub issuer: String,
    pub jwks_uri: Option<String>,
    pub introspection_endpoint: Option<String>,
    pub authorization_endpoint: Option<String>,
    pub token_endpoint: Option<String>,
}

impl Metadata {
    pub async fn fetch(http: &reqwest::Client, issuer: &str) -> Result<Self> {
        let mut failures = Vec::new();
        for url in well_known(issuer) {
            match Self::fetch_one(http, &url).await {
                Ok(metadata) if metadata.issuer == issuer => {
                    let uris = [
                        &metadata.jwks_uri,
                        &metadata.introspection_endpoint,
                        &metadata.authorization_endpoint,
                        &metadata.token_endpoint,
                    ];
                    for uri in uris.into_iter().flatten() {
                        super::check_issuer_url(uri)
                            .with_context(|| format!("in the metadata at {url}"))?;
                    }
                    return Ok(metadata);
                }
                Ok(metadata) => bail!(
                    "the metadata at {url} is for issuer \"{}\", not \"{issuer}\"",
                    metadata.issuer
                ),
                Err(error) => failures.push(format!("{url}: {error:#}")),
            }
        }
        bail!(
            "the authorization server's metadata could not be fetched ({})",
            failures.join("; ")
        )
    }

    async fn fetch_one(http: &reqwest::Client, url: &str) -> Result<Self> {
        let response = http.get(url).send().await?;
        if !response.status().is_success() {
            bail!("HTTP {}", response.status());
        }
        let body = read_capped(response).await.map_err(anyhow::Error::msg)?;
        serde_json::from_slice(&body).context("not the metadata JSON")
    }
}

/// Where the metadata may be: RFC 8414 inserts the well-known part before the issuer's path,
/// OpenID Connect appends it.
fn well_known(issuer: &str) -> Vec<String> {
    let trimmed = issuer.trim_end_matches('/');
    let (origin, path) = match trimmed.find("://").map(|i| i + 3) {
        Some(start) => match trimmed[start..].find('/') {
            Some(slash) => trimmed.split_at(start + slash),
            None => (trimmed, ""),
        },
        None => (trimmed, ""),
    };
    vec![
        format!("{origin}/.well-known/oauth-authorization-server{path}"),
        format!("{trimmed}/.well-known/openid-configuration"),
    ]
}

#[cfg(test)]
mod tests {
    use super::well_known;

    #[test]
    fn the_well_known_part_goes_before_the_issuers_path() {
        assert_eq!(
            well_known("https://id.example.com/tenant/1"),
            [
                "https://id.example.com/.well-known/oauth-authorization-server/tenant/1",
                "https://id.example.com/tenant/1/.well-known/openid-configuration"
            ]
        );
        assert_eq!(
            well_known("http://127.0.0.1:9000"),
            [
                "http://127.0.0.1:9000/.well-known/oauth-authorization-server",
                "http://127.0.0.1:9000/.well-known/openid-configuration"
            ]
        );
    }
}
