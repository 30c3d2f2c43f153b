//! moat as a client of its own authorization server, to learn who is at a browser: the
//! authorization code flow with PKCE, for a token meant for moat itself (RFC 8707), checked as
//! any caller's token is. The principal it names is the one [`OAuth::verify`] names for an MCP
//! request with the same account, so the two compare as equals.
//!
//! Used by the consent pages: a link made for an OAuth caller goes on to the third party only
//! once the browser signs in here as the same principal.

use serde::Deserialize;

use super::client::{authorization_url, post_form};
use super::metadata::Metadata;
use super::{OAuth, TokenError};
use crate::access::Principal;

/// `[auth.oauth] sign_in`: moat's client at its authorization server.
#[derive(Clone, Debug)]
pub struct Client {
    pub client_id: String,
    /// None for a public client (PKCE alone).
    pub client_secret: Option<String>,
}

#[derive(Deserialize)]
struct Tokens {
    access_token: String,
}

impl OAuth {
    /// Where to send a browser to sign in, coming back to `redirect_uri` with `state`.
    pub async fn sign_in_url(
        &self,
        redirect_uri: &str,
        state: &str,
        challenge: &str,
    ) -> Result<String, String> {
        let (client, endpoint) = self.sign_in_at(|m| &m.authorization_endpoint).await?;
        let scope = self.settings.required_scopes.join(" ");
        let mut extra = vec![("resource", self.settings.audience.as_str())];
        if !scope.is_empty() {
            extra.push(("scope", &scope));
        }
        authorization_url(
            &endpoint,
            (&client.client_id, redirect_uri),
            (state, challenge),
            &extra,
        )
    }

    /// The principal a browser signed in as: `code` traded (with `verifier`) for a token, which
    /// must be one moat accepts from its callers.
    pub async fn signed_in(
        &self,
        code: &str,
        verifier: &str,
        redirect_uri: &str,
    ) -> Result<Principal, String> {
        let (client, endpoint) = self.sign_in_at(|m| &m.token_endpoint).await?;
        let form = [
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", redirect_uri),
            ("code_verifier", verifier),
            ("resource", &self.settings.audience),
        ];
        let failed = |e: String| format!("signing in at {endpoint} failed: {e}");
        let id = (&*client.client_id, client.client_secret.as_deref());
        let (status, body) = post_form(&self.http, &endpoint, id, &form)
            .await
            .map_err(failed)?;
        if !status.is_success() {
            return Err(failed(format!("HTTP {status}")));
        }
        let tokens: Tokens = serde_json::from_slice(&body)
            .map_err(|e| failed(format!("no access token in the answer: {e}")))?;
        self.verify(&tokens.access_token)
            .await
            .map_err(|error| match error {
                TokenError::Invalid(why) => format!("the sign-in gave a token moat refuses: {why}"),
                TokenError::InsufficientScope(scopes) => format!(
                    "the sign-in gave a token without the scopes moat needs ({})",
                    scopes.join(" ")
                ),
                TokenError::Unavailable(why) => unavailable(why),
            })
    }

    /// moat's sign-in client, and the endpoint of the issuer's metadata that `pick` names.
    async fn sign_in_at(
        &self,
        pick: fn(&Metadata) -> &Option<String>,
    ) -> Result<(&Client, String), String> {
        let client = self.sign_in_client()?;
        let metadata =
            (self.metadata.get(&self.http, &self.settings.issuer).await).map_err(unavailable)?;
        let endpoint = pick(metadata)
            .clone()
            .ok_or("the issuer's metadata names no authorization or token endpoint")?;
        Ok((client, endpoint))
    }

    fn sign_in_client(&self) -> Result<&Client, String> {
        self.settings.sign_in.as_ref().ok_or_else(|| {
            "this moat's [auth.oauth] names no sign_in client, so no browser can sign in".into()
        })
    }
}

fn unavailable(why: impl std::fmt::Display) -> String {
    format!("the authorization server could not be asked: {why}")
}
