//! Opaque access tokens, checked by asking the issuer (RFC 7662): `active`, the audience (this
//! resource) and expiry. An answer is kept for a short while ([`Client::cache`]) so that a busy
//! client costs the issuer one question per token and interval, not one per request; a revoked
//! token is refused once its answer expires.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value};

use crate::access::Via;
use crate::access::credentials::digest;
use crate::access::oauth::claims::Claims;
use crate::access::oauth::{Settings, TokenError};

/// Answers kept at most; past this the cache starts over.
const MAX_CACHED: usize = 10_000;

/// The client moat introspects as.
#[derive(Clone, Debug)]
pub struct Client {
    /// The introspection endpoint, when not the one the issuer's metadata gives.
    pub endpoint: Option<String>,
    pub client_id: String,
    pub client_secret: String,
    /// How long an answer is trusted; zero asks every time.
    pub cache: Duration,
}

/// An answer, and until when it is trusted.
type Answer = (Instant, Map<String, Value>);

/// Recent answers, by the token's SHA-256 (never the token itself).
#[derive(Default)]
pub struct Introspection {
    answers: Mutex<HashMap<[u8; 32], Answer>>,
}

impl Introspection {
    /// The claims of an active token issued for this resource.
    pub async fn ask(
        &self,
        http: &reqwest::Client,
        endpoint: &str,
        client: &Client,
        token: &str,
        settings: &Settings,
    ) -> Result<Claims, TokenError> {
        let key = digest(token);
        let cached = {
            let answers = self.answers.lock().expect("introspection lock");
            answers
                .get(&key)
                .filter(|(until, _)| Instant::now() < *until)
                .map(|(_, claims)| claims.clone())
        };
        let values = match cached {
            Some(values) => values,
            None => {
                let values = query(http, endpoint, client, token).await?;
                if !client.cache.is_zero() {
                    let mut answers = self.answers.lock().expect("introspection lock");
                    if answers.len() >= MAX_CACHED {
                        answers.clear();
                    }
                    answers.insert(key, (Instant::now() + client.cache, values.clone()));
                }
                values
            }
        };
        let claims = Claims {
            via: Via::Introspection,
            values,
        };
        check(&claims, settings)?;
        Ok(claims)
    }
}

async fn query(
    http: &reqwest::Client,
    endpoint: &str,
    client: &Client,
    token: &str,
) -> Result<Map<String, Value>, TokenError> {
    let unavailable =
        |what: String| TokenError::Unavailable(format!("introspecting at {endpoint}: {what}"));
    let response = http
        .post(endpoint)
        .basic_auth(&client.client_id, Some(&client.client_secret))
        .form(&[("token", token), ("token_type_hint", "access_token")])
        .send()
        .await
        .map_err(|e| unavailable(e.to_string()))?;
    if !response.status().is_success() {
        return Err(unavailable(format!("HTTP {}", response.status())));
    }
    response
        .json::<Map<String, Value>>()
        .await
        .map_err(|e| unavailable(format!("not an introspection answer: {e}")))
}

/// What a JWT's validation checks, on an introspection answer.
fn check(claims: &Claims, settings: &Settings) -> Result<(), TokenError> {
    let values = &claims.values;
    if values.get("active") != Some(&Value::Bool(true)) {
        return Err(TokenError::Invalid(
            "the issuer says the token is not active (expired, revoked or unknown)".into(),
        ));
    }
    if let Some(iss) = values.get("iss").and_then(Value::as_str)
        && iss != settings.issuer
    {
        return Err(TokenError::Invalid(
            "the token was issued by another issuer (iss)".into(),
        ));
    }
    if !claims.has_audience(&settings.audience) {
        return Err(TokenError::Invalid(
            "the token was not issued for this resource (aud); ask for one with this server's \
             resource indicator"
                .into(),
        ));
    }
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let leeway = settings.leeway.as_secs();
    if let Some(exp) = values.get("exp").and_then(Value::as_u64)
        && exp + leeway <= now
    {
        return Err(TokenError::Invalid("the token has expired".into()));
    }
    if let Some(nbf) = values.get("nbf").and_then(Value::as_u64)
        && nbf > now + leeway
    {
        return Err(TokenError::Invalid(
            "the token is not valid yet (nbf)".into(),
        ));
    }
    Ok(())
}
