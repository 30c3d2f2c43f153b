//! OAuth 2.0 Token Exchange (RFC 8693): the caller's access token, which moat has checked,
//! traded at the authorization server for a token meant for the upstream, as moat's own client.
//! A token is kept per source and principal until shortly before it expires, and one exchange
//! at a time is made for each, so a busy caller costs the authorization server one exchange per
//! token lifetime, not one per request, even when its first calls come at once. A kept token
//! serves only calls that present the access token it was exchanged from: once the caller signs
//! in again, or moat stops taking their old token (expired, revoked), it serves no one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Deserialize;

use crate::access::oauth::body::read_capped;

const GRANT_TYPE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
const ACCESS_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:access_token";

/// How long before its expiry a kept token is exchanged again: a request must not leave with a
/// token that expires on the way.
const RENEW_BEFORE: Duration = Duration::from_secs(30);
/// How long a token is kept when the answer gives no `expires_in`.
const KEPT_WITHOUT_EXPIRY: Duration = Duration::from_secs(60);
/// Tokens kept at most; past this the expired ones go, and if none has, all.
const MAX_KEPT: usize = 10_000;

/// Where and as whom moat exchanges tokens for one source.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    pub token_endpoint: String,
    pub client_id: String,
    pub client_secret: String,
    /// The upstream, as the authorization server names it (`audience`).
    pub audience: Option<String>,
    /// The upstream's URL (`resource`, RFC 8707).
    pub resource: Option<String>,
    pub scope: Option<String>,
}

/// A source and a principal.
type Key = (String, String);

/// An exchanged token, with when it must be exchanged again and the digest of the caller's
/// token it was exchanged from.
struct Token {
    until: Instant,
    subject: [u8; 32],
    token: String,
}

/// Exchanged tokens, by source and principal.
#[derive(Default)]
pub struct Kept {
    tokens: Mutex<HashMap<Key, Token>>,
    /// A lock for each source and principal with an exchange under way or waiting.
    turns: Mutex<HashMap<Key, Arc<tokio::sync::Mutex<()>>>>,
}

/// The right to exchange for one source and principal; the last holder removes its lock.
pub struct Turn<'a> {
    kept: &'a Kept,
    key: Key,
    guard: tokio::sync::OwnedMutexGuard<()>,
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let mut turns = self.kept.turns.lock().unwrap_or_else(|e| e.into_inner());
        // Held by the map and this turn only: no one else waits for it.
        if Arc::strong_count(tokio::sync::OwnedMutexGuard::mutex(&self.guard)) == 2 {
            turns.remove(&self.key);
        }
    }
}

impl Kept {
    /// Waits until no other exchange for `source` and `principal` is under way.
    pub async fn turn(&self, source: &str, principal: &str) -> Turn<'_> {
        let key = (source.to_string(), principal.to_string());
        let lock = {
            let mut turns = self.turns.lock().unwrap_or_else(|e| e.into_inner());
            turns.entry(key.clone()).or_default().clone()
        };
        Turn {
            kept: self,
            key,
            guard: lock.lock_owned().await,
        }
    }

    #[cfg(test)]
    pub fn turns_held(&self) -> usize {
        self.turns.lock().unwrap().len()
    }

    /// `principal`'s token from `source`, if it was exchanged from `subject` and is fresh.
    pub fn get(&self, source: &str, principal: &str, subject: &str) -> Option<String> {
        let tokens = self.tokens.lock().unwrap_or_else(|e| e.into_inner());
        tokens
            .get(&(source.to_string(), principal.to_string()))
            .filter(|kept| Instant::now() < kept.until && kept.subject == digest(subject))
            .map(|kept| kept.token.clone())
    }

    /// Keeps `token`, exchanged from `subject`, for `principal` from `source`.
    pub fn keep(&self, source: &str, principal: &str, subject: &str, token: &Exchanged) {
        let lifetime = token
            .expires_in
            .unwrap_or(KEPT_WITHOUT_EXPIRY)
            .min(super::MAX_LIFETIME);
        // A token shorter-lived than the margin is used once, not kept.
        let Some(kept_for) = lifetime.checked_sub(RENEW_BEFORE).filter(|d| !d.is_zero()) else {
            return;
        };
        let mut tokens = self.tokens.lock().unwrap_or_else(|e| e.into_inner());
        if tokens.len() >= MAX_KEPT {
            let now = Instant::now();
            tokens.retain(|_, kept| now < kept.until);
            if tokens.len() >= MAX_KEPT {
                tokens.clear();
            }
        }
        tokens.insert(
            (source.to_string(), principal.to_string()),
            Token {
                until: Instant::now() + kept_for,
                subject: digest(subject),
                token: token.access_token.clone(),
            },
        );
    }

    /// Forgets `principal`'s token from `source`, as when the upstream refused it.
    pub fn forget(&self, source: &str, principal: &str) {
        let mut tokens = self.tokens.lock().unwrap_or_else(|e| e.into_inner());
        tokens.remove(&(source.to_string(), principal.to_string()));
    }
}

fn digest(token: &str) -> [u8; 32] {
    use sha2::Digest as _;
    sha2::Sha256::digest(token.as_bytes()).into()
}

/// A token the authorization server gave for the upstream.
#[derive(Deserialize)]
pub struct Exchanged {
    pub access_token: String,
    #[serde(default, deserialize_with = "seconds")]
    pub expires_in: Option<Duration>,
}

fn seconds<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    Ok(Option::<u64>::deserialize(d)?.map(Duration::from_secs))
}

/// An error answer (RFC 6749 §5.2).
#[derive(Deserialize)]
struct Refused {
    error: String,
    error_description: Option<String>,
}

/// Trades `subject_token` for a token for the upstream, or says why not (never quoting a token).
pub async fn exchange(
    http: &reqwest::Client,
    settings: &Settings,
    subject_token: &str,
) -> Result<Exchanged, String> {
    let endpoint = &settings.token_endpoint;
    let mut form = vec![
        ("grant_type", GRANT_TYPE),
        ("subject_token", subject_token),
        ("subject_token_type", ACCESS_TOKEN_TYPE),
        ("requested_token_type", ACCESS_TOKEN_TYPE),
    ];
    for (name, value) in [
        ("audience", &settings.audience),
        ("resource", &settings.resource),
        ("scope", &settings.scope),
    ] {
        if let Some(value) = value {
            form.push((name, value));
        }
    }
    let response = http
        .post(endpoint)
        .basic_auth(&settings.client_id, Some(&settings.client_secret))
        .form(&form)
        .send()
        .await
        .map_err(|e| {
            format!(
                "the token exchange at {endpoint} failed: {}",
                plain(&e.to_string())
            )
        })?;
    let status = response.status();
    let body = read_capped(response)
        .await
        .map_err(|e| format!("the token exchange at {endpoint} failed: {e}"))?;
    if !status.is_success() {
        let why = match serde_json::from_slice::<Refused>(&body) {
            Ok(refused) => match refused.error_description {
                Some(description) => format!("{} ({})", plain(&refused.error), plain(&description)),
                None => plain(&refused.error),
            },
            Err(_) => format!("HTTP {status}"),
        };
        return Err(format!(
            "the token exchange at {endpoint} was refused: {why}"
        ));
    }
    let exchanged: Exchanged = serde_json::from_slice(&body)
        .map_err(|e| format!("the token exchange at {endpoint} answered no access token: {e}"))?;
    if exchanged.access_token.is_empty() {
        return Err(format!(
            "the token exchange at {endpoint} answered an empty access token"
        ));
    }
    Ok(exchanged)
}

/// What the authorization server said, cut short and without control characters, fit for an
/// error a caller reads and a log line.
pub(super) fn plain(text: &str) -> String {
    text.chars().filter(|c| !c.is_control()).take(200).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exchanged(token: &str, seconds: Option<u64>) -> Exchanged {
        Exchanged {
            access_token: token.into(),
            expires_in: seconds.map(Duration::from_secs),
        }
    }

    #[test]
    fn a_token_is_kept_per_source_and_principal_until_shortly_before_it_expires() {
        let kept = Kept::default();
        kept.keep("tracker", "alice", "t", &exchanged("a", Some(300)));
        kept.keep("tracker", "bob", "t", &exchanged("b", Some(300)));
        assert_eq!(kept.get("tracker", "alice", "t").as_deref(), Some("a"));
        assert_eq!(kept.get("tracker", "bob", "t").as_deref(), Some("b"));
        assert_eq!(kept.get("wiki", "alice", "t"), None);
        // Living less than the margin: used for its request only.
        kept.keep("wiki", "alice", "t", &exchanged("short", Some(20)));
        assert_eq!(kept.get("wiki", "alice", "t"), None);
        kept.forget("tracker", "alice");
        assert_eq!(kept.get("tracker", "alice", "t"), None);
        assert_eq!(kept.get("tracker", "bob", "t").as_deref(), Some("b"));
        // A lifetime near 2^64 seconds is capped, not an overflow.
        let forever = Exchanged {
            access_token: "long".into(),
            expires_in: Some(Duration::from_secs(u64::MAX)),
        };
        kept.keep("tracker", "carol", "t", &forever);
        assert_eq!(kept.get("tracker", "carol", "t").as_deref(), Some("long"));
    }

    #[test]
    fn what_the_server_says_is_shown_plain_and_short() {
        assert_eq!(plain("bad\r\ntoken"), "badtoken");
        assert_eq!(plain(&"x".repeat(500)).len(), 200);
    }
}
