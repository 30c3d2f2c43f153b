//! Opaque access tokens, checked by asking the issuer (RFC 7662): `active`, the issuer, the
//! audience (this resource) and the times. An answer is kept for a short while
//! ([`Client::cache`]) so that a busy client costs the issuer one question per token and
//! interval, not one per request; a revoked token is refused once its answer expires.
//!
//! Anyone can send a token moat has never seen, and each would cost a question asked with moat's
//! own client credentials. So a refused token is remembered (by digest) for [`REFUSED_FOR`], and
//! tokens moat knows nothing of are asked about at most [`Client::max_per_second`] a second
//! (a second's worth may come at once) and [`MAX_IN_FLIGHT`] at a time. Beyond that a token is
//! answered "unavailable" (HTTP 503 with `Retry-After`) without asking the issuer: a flood of
//! made-up tokens may delay new tokens for a few seconds, but cannot make moat flood the issuer,
//! and cannot refuse a valid token as invalid (a client told its token is invalid would drop
//! it). Tokens with a kept answer, JWTs and API keys are not held back.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value};
use tokio::sync::Semaphore;

use crate::access::Via;
use crate::access::credentials::digest;
use crate::access::oauth::body::read_capped;
use crate::access::oauth::claims::Claims;
use crate::access::oauth::{Settings, TokenError};

/// Answers kept at most; past this the cache starts over.
const MAX_CACHED: usize = 10_000;
/// How long a refused token stays refused without asking again.
pub const REFUSED_FOR: Duration = Duration::from_secs(30);
/// Refusals kept at most; past this the expired ones go, and if none has, all.
const MAX_REFUSED: usize = 10_000;
/// Introspections of unknown tokens a second, unless configured.
pub const DEFAULT_MAX_PER_SECOND: u32 = 50;
/// Introspections waiting on the issuer at once: a slow issuer ties up this many requests.
pub const MAX_IN_FLIGHT: usize = 32;

/// The client moat introspects as.
#[derive(Clone, Debug)]
pub struct Client {
    /// The introspection endpoint, when not the one the issuer's metadata gives.
    pub endpoint: Option<String>,
    pub client_id: String,
    pub client_secret: String,
    /// How long an answer is trusted; zero asks every time.
    pub cache: Duration,
    /// Questions about tokens moat has no answer for, a second.
    pub max_per_second: u32,
}

/// An answer, and until when it is trusted.
type Answer = (Instant, Map<String, Value>);

/// Recent answers and refusals, by the token's SHA-256 (never the token itself), and what is
/// left of the budget for new questions.
pub struct Introspection {
    answers: Mutex<HashMap<[u8; 32], Answer>>,
    /// Refused tokens: until when, and why.
    refused: Mutex<HashMap<[u8; 32], (Instant, String)>>,
    budget: Mutex<Budget>,
    in_flight: Semaphore,
}

/// A bucket of questions, filled at `per_second` up to a second's worth.
struct Budget {
    per_second: f64,
    left: f64,
    at: Instant,
}

impl Budget {
    fn new(per_second: u32) -> Self {
        let per_second = f64::from(per_second.max(1));
        Self {
            per_second,
            left: per_second,
            at: Instant::now(),
        }
    }

    fn take(&mut self) -> bool {
        let now = Instant::now();
        let refill = now.duration_since(self.at).as_secs_f64() * self.per_second;
        self.left = (self.left + refill).min(self.per_second);
        self.at = now;
        if self.left < 1.0 {
            return false;
        }
        self.left -= 1.0;
        true
    }
}

impl Introspection {
    pub fn new(max_per_second: u32) -> Self {
        Self {
            answers: Mutex::default(),
            refused: Mutex::default(),
            budget: Mutex::new(Budget::new(max_per_second)),
            in_flight: Semaphore::new(MAX_IN_FLIGHT),
        }
    }

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
        if let Some(values) = self.cached(&key) {
            return checked(values, settings);
        }
        if let Some(why) = self.refusal(&key) {
            return Err(TokenError::Invalid(why));
        }
        let busy = || {
            TokenError::Unavailable(
                "too many unknown tokens are being checked; try again shortly".into(),
            )
        };
        let Ok(_slot) = self.in_flight.try_acquire() else {
            return Err(busy());
        };
        if !self
            .budget
            .lock()
            .expect("introspection budget lock")
            .take()
        {
            return Err(busy());
        }
        let values = query(http, endpoint, client, token).await?;
        match checked(values.clone(), settings) {
            Ok(claims) => {
                if !client.cache.is_zero() {
                    let mut answers = self.answers.lock().expect("introspection lock");
                    if answers.len() >= MAX_CACHED {
                        answers.clear();
                    }
                    answers.insert(key, (Instant::now() + client.cache, values));
                }
                Ok(claims)
            }
            Err(TokenError::Invalid(why)) => {
                self.refuse(key, &why);
                Err(TokenError::Invalid(why))
            }
            Err(other) => Err(other),
        }
    }

    fn cached(&self, key: &[u8; 32]) -> Option<Map<String, Value>> {
        let answers = self.answers.lock().expect("introspection lock");
        answers
            .get(key)
            .filter(|(until, _)| Instant::now() < *until)
            .map(|(_, values)| values.clone())
    }

    fn refusal(&self, key: &[u8; 32]) -> Option<String> {
        let refused = self.refused.lock().expect("refused tokens lock");
        refused
            .get(key)
            .filter(|(until, _)| Instant::now() < *until)
            .map(|(_, why)| why.clone())
    }

    fn refuse(&self, key: [u8; 32], why: &str) {
        let mut refused = self.refused.lock().expect("refused tokens lock");
        if refused.len() >= MAX_REFUSED {
            let now = Instant::now();
            refused.retain(|_, (until, _)| now < *until);
            if refused.len() >= MAX_REFUSED {
                refused.clear();
            }
        }
        refused.insert(key, (Instant::now() + REFUSED_FOR, why.to_string()));
    }
}

/// The claims of an answer, once checked.
fn checked(values: Map<String, Value>, settings: &Settings) -> Result<Claims, TokenError> {
    let claims = Claims {
        via: Via::Introspection,
        values,
    };
    check(&claims, settings)?;
    Ok(claims)
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
    let body = read_capped(response).await.map_err(unavailable)?;
    serde_json::from_slice(&body)
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// An introspection endpoint on loopback that answers "inactive" after `delay`, counting
    /// the questions it has at once at most.
    async fn slow_issuer(delay: Duration) -> (String, Arc<AtomicUsize>) {
        let (now, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let counted = most.clone();
        let answer = move || {
            let (now, most) = (now.clone(), most.clone());
            async move {
                most.fetch_max(now.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                tokio::time::sleep(delay).await;
                now.fetch_sub(1, Ordering::SeqCst);
                (
                    [(axum::http::header::CONTENT_TYPE, "application/json")],
                    r#"{"active": false}"#,
                )
            }
        };
        let app = axum::Router::new().route("/introspect", axum::routing::post(answer));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/introspect", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (url, counted)
    }

    #[tokio::test]
    async fn a_slow_issuer_ties_up_at_most_32_requests() {
        let (endpoint, most) = slow_issuer(Duration::from_millis(500)).await;
        let client = Client {
            endpoint: Some(endpoint.clone()),
            client_id: "moat".into(),
            client_secret: "secret".into(),
            cache: Duration::ZERO,
            max_per_second: 1000,
        };
        let settings = Settings {
            issuer: "http://issuer.test".into(),
            audience: "http://moat.test/mcp".into(),
            required_scopes: Vec::new(),
            jwks_uri: None,
            introspection: Some(client.clone()),
            sign_in: None,
            leeway: Duration::ZERO,
            jwks_cooldown: Duration::ZERO,
        };
        let introspection = Arc::new(Introspection::new(client.max_per_second));
        crate::supply::source::install_tls_provider();
        let http = reqwest::Client::new();
        let asks = (0..40).map(|i| {
            let (introspection, http) = (introspection.clone(), http.clone());
            let (endpoint, client, settings) = (endpoint.clone(), client.clone(), settings.clone());
            tokio::spawn(async move {
                let token = format!("unknown-opaque-token-{i}");
                introspection
                    .ask(&http, &endpoint, &client, &token, &settings)
                    .await
            })
        });
        let mut busy = 0;
        for ask in asks.collect::<Vec<_>>() {
            match ask.await.unwrap() {
                Err(TokenError::Unavailable(why)) if why.contains("too many unknown tokens") => {
                    busy += 1
                }
                Err(TokenError::Invalid(_)) => {}
                Err(other) => panic!("neither refused nor turned away: {other:?}"),
                Ok(_) => panic!("an inactive token accepted"),
            }
        }
        assert_eq!(
            most.load(Ordering::SeqCst),
            MAX_IN_FLIGHT,
            "at once at the issuer"
        );
        assert_eq!(
            busy,
            40 - MAX_IN_FLIGHT,
            "turned away at once, never queued"
        );
    }
}
