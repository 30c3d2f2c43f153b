//! The one a request acts for, as moat established it.

use std::fmt;

/// How a principal proved who it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    /// The local bearer token in the owner-only token file.
    LocalToken,
    /// A static API key from the configuration.
    ApiKey,
    /// A JWT access token signed by the configured issuer.
    Jwt,
    /// An opaque access token the issuer's introspection endpoint vouched for.
    Introspection,
    /// The user who started moat on stdio.
    Stdio,
    /// Nobody: HTTP with authentication explicitly off.
    Unauthenticated,
}

impl Via {
    pub fn as_str(self) -> &'static str {
        match self {
            Via::LocalToken => "local-token",
            Via::ApiKey => "api-key",
            Via::Jwt => "jwt",
            Via::Introspection => "introspection",
            Via::Stdio => "stdio",
            Via::Unauthenticated => "none",
        }
    }
}

/// The OAuth access token a request came with, once checked: what moat trades for a token meant
/// for an upstream (RFC 8693) on its caller's behalf. It never prints.
#[derive(Clone)]
pub struct AccessToken(std::sync::Arc<str>);

impl AccessToken {
    pub fn new(token: &str) -> Self {
        Self(token.into())
    }

    pub fn secret(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for AccessToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AccessToken(<redacted>)")
    }
}

/// An authenticated caller: its name (what quotas, metrics and the audit log key on) and the
/// facts tool-set rules match.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Principal {
    /// `key:NAME` for an API key, `local` for the local token, `stdio` or `anonymous`; for an
    /// OAuth token its `sub`, as `sub:SUB` when the `sub` has a `:` or is one of those names
    /// (else `client:CLIENT_ID`): no two authenticators' principals share a name.
    pub name: String,
    pub via: Via,
    /// The API key's name.
    pub key: Option<String>,
    /// The token's `sub`.
    pub subject: Option<String>,
    /// The token's `client_id` (or `azp`).
    pub client_id: Option<String>,
    /// The token's scopes.
    pub scopes: Vec<String>,
    /// The token's `groups` (or `roles`).
    pub groups: Vec<String>,
    /// The token's claims, all of them, for the policies that read some
    /// (`principal.claims.NAME`); empty for a principal without a token.
    pub claims: serde_json::Map<String, serde_json::Value>,
}

impl Principal {
    fn plain(name: &str, via: Via) -> Self {
        Self {
            name: name.to_string(),
            via,
            key: None,
            subject: None,
            client_id: None,
            scopes: Vec::new(),
            groups: Vec::new(),
            claims: serde_json::Map::new(),
        }
    }

    /// The user who started moat over stdio, named `name` (`stdio` unless configured).
    pub fn stdio(name: &str) -> Self {
        Self::plain(name, Via::Stdio)
    }

    /// The holder of the local token.
    pub fn local() -> Self {
        Self::plain("local", Via::LocalToken)
    }

    /// Anyone, when authentication is off.
    pub fn anonymous() -> Self {
        Self::plain("anonymous", Via::Unauthenticated)
    }

    /// The holder of the API key `name`.
    pub fn api_key(name: &str) -> Self {
        Self {
            key: Some(name.to_string()),
            ..Self::plain(&format!("key:{name}"), Via::ApiKey)
        }
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (by {})", self.name, self.via.as_str())
    }
}
