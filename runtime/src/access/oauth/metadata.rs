//! The authorization server's metadata: RFC 8414 `/.well-known/oauth-authorization-server`,
//! else OpenID Connect discovery, whose `issuer` must be the one configured (RFC 8414 §3.3).

use anyhow::{Context, Result, bail};
use serde::Deserialize;

#[derive(Clone, Debug, Deserialize)]
pub struct Metadata {
    pub issuer: String,
    pub jwks_uri: Option<String>,
    pub introspection_endpoint: Option<String>,
}

impl Metadata {
    pub async fn fetch(http: &reqwest::Client, issuer: &str) -> Result<Self> {
        let mut failures = Vec::new();
        for url in well_known(issuer) {
            match Self::fetch_one(http, &url).await {
                Ok(metadata) if metadata.issuer == issuer => {
                    for uri in [&metadata.jwks_uri, &metadata.introspection_endpoint]
                        .into_iter()
                        .flatten()
                    {
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
        response.json().await.context("not the metadata JSON")
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
