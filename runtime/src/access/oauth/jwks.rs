//! JWT access tokens checked against the issuer's JSON Web Key Set, fetched on first use, kept,
//! and fetched again when a token names a key moat does not know (the issuer rotated its keys)
//! or the set is old. Fetches are one at a time and at most one per cooldown ([`DEFAULT_COOLDOWN`]), so tokens
//! with made-up key ids cannot make moat hammer the issuer (nor wait on a slow one more than
//! once per interval); while a fetch runs, tokens signed by known keys are checked without
//! waiting for it, and while the issuer is unreachable the keys fetched before stay in use.
//!
//! A token's signature is verified once per key set: the claims of a verified token are kept
//! (by the token's SHA-256) until it expires or the key set changes, and every request checks
//! `exp` and `nbf` on them again. A client sends the same token for its whole lifetime, so RSA
//! verification costs a token, not a request.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value};
use tokio::sync::{Mutex, RwLock};

use crate::access::Via;
use crate::access::credentials::digest;
use crate::access::oauth::body::read_capped;
use crate::access::oauth::claims::Claims;
use crate::access::oauth::{Settings, TokenError};

/// The least time between two fetches of the key set, unless configured.
pub const DEFAULT_COOLDOWN: Duration = Duration::from_secs(10);
/// A key set older than this is fetched again before use.
pub const MAX_AGE: Duration = Duration::from_secs(15 * 60);
/// Verified tokens kept at most; past this the cache starts over.
const MAX_VERIFIED: usize = 10_000;

/// Whether `token` has a JWT's three dot-separated parts.
pub fn looks_like_jwt(token: &str) -> bool {
    token.split('.').count() == 3
}

/// A verified token's claims.
type Verified = Arc<Map<String, Value>>;

/// The key set, as last fetched.
pub struct Jwks {
    keys: RwLock<KeySet>,
    /// The last fetch, when and how it ended; held by the one request fetching.
    last_fetch: Mutex<Option<(Instant, Result<(), String>)>>,
    /// The least time between two fetches.
    cooldown: Duration,
    /// Tokens verified against the current key set: their claims, by the token's SHA-256.
    verified: std::sync::Mutex<HashMap<[u8; 32], Verified>>,
}

#[derive(Default)]
struct KeySet {
    /// Where these keys came from.
    uri: String,
    keys: Vec<Key>,
    /// When they were fetched.
    fetched: Option<Instant>,
}

struct Key {
    id: Option<String>,
    algorithm: Option<String>,
    decoding: DecodingKey,
}

impl KeySet {
    fn find(&self, uri: &str, kid: Option<&str>, alg: Algorithm) -> Option<&DecodingKey> {
        if self.uri != uri {
            return None;
        }
        let alg = format!("{alg:?}");
        let fits = |k: &&Key| k.algorithm.as_ref().is_none_or(|a| *a == alg);
        match kid {
            Some(kid) => self
                .keys
                .iter()
                .filter(fits)
                .find(|k| k.id.as_deref() == Some(kid)),
            // No `kid`: only a set of one key says which key it is.
            None if self.keys.len() == 1 => self.keys.iter().find(fits),
            None => None,
        }
        .map(|k| &k.decoding)
    }
}

impl Jwks {
    /// Keys fetched at most once per `cooldown`.
    pub fn new(cooldown: Duration) -> Self {
        Self {
            keys: RwLock::default(),
            last_fetch: Mutex::new(None),
            cooldown,
            verified: std::sync::Mutex::default(),
        }
    }

    /// The claims of `token` once its signature, issuer, audience and times are checked.
    pub async fn verify(
        &self,
        http: &reqwest::Client,
        uri: &str,
        token: &str,
        settings: &Settings,
    ) -> Result<Claims, TokenError> {
        let digest = digest(token);
        let cached = self
            .verified
            .lock()
            .expect("verified tokens lock")
            .get(&digest)
            .cloned();
        if let Some(claims) = cached {
            check_times(&claims, settings.leeway)?;
            return Ok(Claims {
                via: Via::Jwt,
                values: (*claims).clone(),
            });
        }
        let header = jsonwebtoken::decode_header(token)
            .map_err(|_| TokenError::Invalid("not a well-formed JWT".into()))?;
        if !is_asymmetric(header.alg) {
            return Err(TokenError::Invalid(format!(
                "tokens signed with {:?} are not accepted (only the issuer's public keys)",
                header.alg
            )));
        }
        let kid = header.kid.as_deref();
        let key = match self.known(uri, kid, header.alg).await {
            (Some(key), true) => key,
            (stale, _) => match self.refetch(http, uri).await {
                Ok(()) => self.known(uri, kid, header.alg).await.0.ok_or_else(|| {
                    TokenError::Invalid(format!(
                        "signed by a key the issuer does not publish (kid {})",
                        kid.map_or("missing".into(), |k| format!("\"{k}\""))
                    ))
                })?,
                // A key fetched before is still the issuer's while it cannot say otherwise.
                Err(_) if stale.is_some() => stale.expect("checked"),
                Err(error) => return Err(error),
            },
        };
        let mut validation = Validation::new(header.alg);
        validation.set_issuer(&[&settings.issuer]);
        validation.set_audience(&[&settings.audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        validation.validate_nbf = true;
        validation.leeway = settings.leeway.as_secs();
        let data = jsonwebtoken::decode::<Map<String, Value>>(token, &key, &validation)
            .map_err(|e| TokenError::Invalid(refusal(e.kind())))?;
        let mut verified = self.verified.lock().expect("verified tokens lock");
        if verified.len() >= MAX_VERIFIED {
            verified.clear();
        }
        verified.insert(digest, Arc::new(data.claims.clone()));
        Ok(Claims {
            via: Via::Jwt,
            values: data.claims,
        })
    }

    /// The key for `kid` if the set holds it, and whether the set is fresh.
    async fn known(
        &self,
        uri: &str,
        kid: Option<&str>,
        alg: Algorithm,
    ) -> (Option<DecodingKey>, bool) {
        let keys = self.keys.read().await;
        let fresh = keys.uri == uri && keys.fetched.is_some_and(|at| at.elapsed() < MAX_AGE);
        (keys.find(uri, kid, alg).cloned(), fresh)
    }

    /// Fetches the set again, unless the last fetch was less than the cooldown ago: then that
    /// fetch's outcome stands.
    async fn refetch(&self, http: &reqwest::Client, uri: &str) -> Result<(), TokenError> {
        let unavailable = |error: &str| {
            TokenError::Unavailable(format!(
                "the issuer's keys could not be fetched from {uri}: {error}"
            ))
        };
        let mut last_fetch = self.last_fetch.lock().await;
        if let Some((at, outcome)) = &*last_fetch
            && at.elapsed() < self.cooldown
            && self.keys.read().await.uri == uri
        {
            return outcome.as_ref().map_err(|e| unavailable(e)).copied();
        }
        let outcome = match fetch(http, uri).await {
            Ok(fetched) => {
                tracing::info!("fetched {} signing keys from {uri}", fetched.len());
                *self.keys.write().await = KeySet {
                    uri: uri.to_string(),
                    keys: fetched,
                    fetched: Some(Instant::now()),
                };
                // A key the issuer dropped must not live on in tokens verified with it.
                self.verified.lock().expect("verified tokens lock").clear();
                Ok(())
            }
            Err(error) => {
                tracing::warn!("fetching the issuer's keys from {uri}: {error}");
                Err(error)
            }
        };
        let result = outcome.as_ref().map_err(|e| unavailable(e)).copied();
        *last_fetch = Some((Instant::now(), outcome));
        result
    }
}

async fn fetch(http: &reqwest::Client, uri: &str) -> Result<Vec<Key>, String> {
    let response = http.get(uri).send().await.map_err(|e| e.to_string())?;
    if !response.status().is_success() {
        return Err(format!("HTTP {}", response.status()));
    }
    let bytes = read_capped(response).await?;
    let set: Value = serde_json::from_slice(&bytes).map_err(|e| format!("not JSON: {e}"))?;
    let listed = set
        .get("keys")
        .and_then(Value::as_array)
        .ok_or("no `keys` list")?;
    // A key moat cannot use (another type, an encryption key) is skipped, not fatal.
    let keys: Vec<Key> = listed
        .iter()
        .filter(|k| k.get("use").is_none_or(|u| u == "sig"))
        .filter_map(|k| serde_json::from_value::<Jwk>(k.clone()).ok())
        .filter_map(|jwk| {
            Some(Key {
                id: jwk.common.key_id.clone(),
                algorithm: jwk.common.key_algorithm.map(|a| format!("{a:?}")),
                decoding: DecodingKey::from_jwk(&jwk).ok()?,
            })
        })
        .collect();
    if keys.is_empty() && !listed.is_empty() {
        return Err("none of its keys is a signing key moat can use".into());
    }
    Ok(keys)
}

/// `exp` and `nbf` of claims verified before, checked again now.
fn check_times(claims: &Map<String, Value>, leeway: Duration) -> Result<(), TokenError> {
    let now = jsonwebtoken::get_current_timestamp();
    let leeway = leeway.as_secs();
    if claims
        .get("exp")
        .and_then(Value::as_u64)
        .is_none_or(|exp| exp.saturating_add(leeway) <= now)
    {
        return Err(TokenError::Invalid(refusal(&ErrorKind::ExpiredSignature)));
    }
    if claims
        .get("nbf")
        .and_then(Value::as_u64)
        .is_some_and(|nbf| nbf > now.saturating_add(leeway))
    {
        return Err(TokenError::Invalid(refusal(&ErrorKind::ImmatureSignature)));
    }
    Ok(())
}

fn is_asymmetric(alg: Algorithm) -> bool {
    !matches!(alg, Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512)
}

/// Why a signed token is refused, in words a client can act on.
fn refusal(kind: &ErrorKind) -> String {
    match kind {
        ErrorKind::ExpiredSignature => "the token has expired".into(),
        ErrorKind::ImmatureSignature => "the token is not valid yet (nbf)".into(),
        ErrorKind::InvalidAudience => {
            "the token was issued for another resource (aud); ask for one with this server's \
             resource indicator"
                .into()
        }
        ErrorKind::InvalidIssuer => "the token was issued by another issuer (iss)".into(),
        ErrorKind::InvalidSignature => "the token's signature does not verify".into(),
        ErrorKind::MissingRequiredClaim(claim) => format!("the token has no `{claim}` claim"),
        ErrorKind::InvalidAlgorithm => "the token's algorithm does not fit its key".into(),
        other => format!("the token does not verify ({other:?})"),
    }
}
