//! A request's bearer credential, checked against whatever the operator configured: the local
//! token, API keys, OAuth access tokens. The answer is a [`Principal`] or a [`Refusal`] that says
//! what to do, and never quotes the credential.

use crate::access::Principal;
use crate::access::credentials::{self, ApiKeys};
use crate::access::oauth::{OAuth, TokenError};

/// The longest credential read: a JWT with many claims fits, a header meant to exhaust memory
/// does not.
pub const MAX_CREDENTIAL_BYTES: usize = 8 << 10;

/// Why a request is turned away.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// No `Authorization: Bearer …` at all: the client should get a token.
    Missing,
    /// A credential that is not one (wrong, expired, for another resource…): why.
    Invalid(String),
    /// A valid token without these scopes.
    InsufficientScope(Vec<String>),
    /// The authorization server could not be asked.
    Unavailable(String),
}

impl Refusal {
    /// A short kind, for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Refusal::Missing => "missing",
            Refusal::Invalid(_) => "invalid",
            Refusal::InsufficientScope(_) => "insufficient_scope",
            Refusal::Unavailable(_) => "unavailable",
        }
    }
}

/// Every credential moat accepts.
#[derive(Default)]
pub struct Authenticator {
    /// The local token's SHA-256, when it is in force.
    local: Option<[u8; 32]>,
    keys: ApiKeys,
    /// Boxed: it is large, and most moats have none.
    oauth: Option<Box<OAuth>>,
}

impl Authenticator {
    pub fn new(local_token: Option<&str>, keys: ApiKeys, oauth: Option<OAuth>) -> Self {
        Self {
            local: local_token.map(credentials::digest),
            keys,
            oauth: oauth.map(Box::new),
        }
    }

    /// The OAuth issuer's checker, when OAuth is configured.
    pub fn oauth(&self) -> Option<&OAuth> {
        self.oauth.as_deref()
    }

    /// The credentials this accepts, for an operator reading why a request was refused: the
    /// local token is in force only when `[auth]` names no API keys and no OAuth issuer, and a
    /// host still sending it is the usual mistake.
    pub fn accepted(&self) -> String {
        let mut kinds = Vec::new();
        if self.local.is_some() {
            kinds.push(
                "the local token (`moat config HOST --http ADDRESS` puts it in a host's \
                 configuration)"
                    .to_string(),
            );
        }
        if !self.keys.is_empty() {
            let count = self.keys.len();
            let keys = if count == 1 { "key" } else { "keys" };
            kinds.push(format!(
                "the {count} API {keys} of [auth] api_keys (`moat auth key NAME` makes one)"
            ));
        }
        if let Some(oauth) = &self.oauth {
            kinds.push(format!(
                "an OAuth access token from {} for this resource",
                oauth.issuer()
            ));
        }
        match (kinds.is_empty(), self.local.is_some()) {
            (true, _) => "no credential".into(),
            (false, true) => format!("only {}", kinds.join(" or ")),
            (false, false) => format!(
                "only {}; not the local token, which [auth] api_keys or oauth turns off",
                kinds.join(" or ")
            ),
        }
    }

    /// The principal the `Authorization` header's value stands for.
    pub async fn authenticate(&self, authorization: Option<&[u8]>) -> Result<Principal, Refusal> {
        let Some(value) = authorization else {
            return Err(Refusal::Missing);
        };
        if value.len() > MAX_CREDENTIAL_BYTES {
            return Err(Refusal::Invalid(format!(
                "the credential is longer than {MAX_CREDENTIAL_BYTES} bytes"
            )));
        }
        let token = bearer_token(value)?;
        if let Some(local) = &self.local
            && credentials::same_digest(local, &credentials::digest(token))
        {
            return Ok(Principal::local());
        }
        if let Some(name) = self.keys.find(token) {
            return Ok(Principal::api_key(name));
        }
        match &self.oauth {
            Some(oauth) => oauth.verify(token).await.map_err(|error| match error {
                TokenError::Invalid(why) => Refusal::Invalid(why),
                TokenError::InsufficientScope(scopes) => Refusal::InsufficientScope(scopes),
                TokenError::Unavailable(why) => Refusal::Unavailable(why),
            }),
            None => Err(Refusal::Invalid(
                "the bearer token is not one moat accepts".into(),
            )),
        }
    }
}

/// The token of an `Authorization: Bearer TOKEN` header's value.
pub fn bearer_token(value: &[u8]) -> Result<&str, Refusal> {
    let value = std::str::from_utf8(value)
        .map_err(|_| Refusal::Invalid("the Authorization header is not text".into()))?;
    let token = match value.split_once(' ') {
        Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") => token.trim(),
        _ => {
            return Err(Refusal::Invalid(
                "the Authorization header is not `Bearer TOKEN`".into(),
            ));
        }
    };
    if token.is_empty() {
        return Err(Refusal::Invalid("the bearer token is empty".into()));
    }
    Ok(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_it_accepts_names_each_credential_and_the_local_tokens_absence() {
        let local = Authenticator::new(Some("moat_local"), ApiKeys::default(), None);
        assert!(local.accepted().starts_with("only the local token"));
        let keys = ApiKeys::new(vec![("ci".into(), [0; 32]), ("bot".into(), [1; 32])]);
        let accepted = Authenticator::new(None, keys, None).accepted();
        assert!(
            accepted.starts_with("only the 2 API keys of [auth] api_keys"),
            "{accepted}"
        );
        assert!(accepted.contains("`moat auth key NAME`"), "{accepted}");
        assert!(
            accepted.ends_with("not the local token, which [auth] api_keys or oauth turns off")
        );
    }
}
