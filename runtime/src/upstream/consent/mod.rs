//! The caller's consent at a third party: an OAuth 2.1 authorization-code flow with PKCE,
//! started by a URL the caller's client opens (URL elicitation) and ended at moat's callback
//! for that source ([`steps`] says how a link connects only the person it was made for).
//! The tokens it yields are kept per source and principal, and refreshed with the refresh token
//! when they expire.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Deserialize;

pub use self::steps::{Answer, Link, Proof, Step};
use super::shared::SharedConsents;
use super::store::{Entry, Store};
use crate::access::oauth::body::read_capped;

pub mod steps;

/// How long a link may wait for the caller.
const LINK_LIFETIME: Duration = Duration::from_secs(600);
/// Links waiting at most; past this the expired ones go, and if none has, the oldest.
const MAX_PENDING: usize = 10_000;
/// Tokens kept at most.
const MAX_KEPT: usize = 100_000;
/// How long before its expiry a token is refreshed.
const REFRESH_BEFORE: Duration = Duration::from_secs(30);
/// How often, and how many times, a replica looks for the tokens another one is refreshing
/// before it refreshes them itself.
const REFRESH_WAIT_STEP: Duration = Duration::from_millis(100);
const REFRESH_WAIT_STEPS: usize = 50;

/// The third party's authorization server, and moat as its client.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    pub authorization_endpoint: String,
    pub token_endpoint: String,
    pub client_id: String,
    /// None for a public client (PKCE alone).
    pub client_secret: Option<String>,
    pub scope: Option<String>,
    /// The upstream's URL, for a token meant for it (RFC 8707).
    pub resource: Option<String>,
    /// moat's callback for this source, as the third party knows it:
    /// `…/oauth/callback/NAME`.
    pub redirect_uri: String,
    /// The third party's issuer: when given, its answers must name it in `iss` (RFC 9207).
    pub issuer: Option<String>,
    /// Whether principals no browser can prove (API keys, the local token) may consent, by
    /// confirming a page that names them.
    pub confirm_unproven: bool,
}

impl Settings {
    /// moat as the caller's browser reaches it: the redirect_uri before `/oauth/callback/`.
    pub fn base(&self) -> &str {
        let uri = &self.redirect_uri;
        uri.rfind("/oauth/callback/").map_or(uri, |at| &uri[..at])
    }
}

/// A consent step waiting here (serialized, as Redis would keep it), until its time is up.
struct Pending {
    step: Vec<u8>,
    until: Instant,
}

/// A principal's tokens from one source.
#[derive(Clone)]
struct Tokens {
    access: String,
    refresh: Option<String>,
    /// When the access token must be refreshed, in seconds since the Unix epoch; `None`: it
    /// says no expiry.
    until: Option<u64>,
}

impl Tokens {
    fn fresh(&self) -> bool {
        self.until.is_none_or(|until| now() < until)
    }

    fn from_entry(entry: Entry) -> ((String, String), Self) {
        let tokens = Self {
            access: entry.access,
            refresh: entry.refresh,
            until: entry.refresh_at,
        };
        ((entry.source, entry.principal), tokens)
    }

    fn to_entry(&self, source: &str, principal: &str) -> Entry {
        Entry {
            source: source.to_string(),
            principal: principal.to_string(),
            access: self.access.clone(),
            refresh: self.refresh.clone(),
            refresh_at: self.until,
        }
    }
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Where callers' tokens are kept besides this moat's memory.
#[derive(Default)]
pub enum Keeping {
    /// Nowhere: a restart asks every caller again.
    #[default]
    Memory,
    /// A sealed file, read again when another process changes it.
    File(Store),
    /// Redis, with the links, so that every replica serves them; what is here is a copy that
    /// serves while Redis cannot be reached.
    Shared(SharedConsents),
}

/// Links waiting for callers, and the tokens callers gave.
#[derive(Default)]
pub struct Consents {
    /// Consent steps kept here, which no other replica can take (Redis was unreachable, or
    /// there is none).
    pending: Mutex<HashMap<String, Pending>>,
    tokens: Mutex<HashMap<(String, String), Tokens>>,
    /// Woken whenever a caller's tokens arrive.
    arrived: tokio::sync::Notify,
    keeping: Keeping,
}

/// What a token endpoint answers.
#[derive(Deserialize)]
struct Tokened {
    access_token: String,
    refresh_token: Option<String>,
    expires_in: Option<u64>,
}

#[derive(Deserialize)]
struct Refused {
    error: String,
    error_description: Option<String>,
}

impl Consents {
    /// Tokens kept as `keeping` says (and read from a file now).
    pub fn new(keeping: Keeping) -> anyhow::Result<Self> {
        let consents = Self {
            keeping,
            ..Self::default()
        };
        consents.reload()?;
        Ok(consents)
    }

    /// Reads the file's tokens in place of those held.
    fn reload(&self) -> anyhow::Result<()> {
        let Keeping::File(store) = &self.keeping else {
            return Ok(());
        };
        let entries = store.load()?;
        *self.tokens.lock().unwrap_or_else(|e| e.into_inner()) =
            entries.into_iter().map(Tokens::from_entry).collect();
        Ok(())
    }

    /// Writes the tokens held to the file; a failure is logged (the tokens still serve).
    fn persist(&self) {
        let Keeping::File(store) = &self.keeping else {
            return;
        };
        let entries: Vec<Entry> = self
            .tokens
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|((source, principal), t)| t.to_entry(source, principal))
            .collect();
        if let Err(error) = store.save(&entries) {
            tracing::error!("could not keep callers' tokens in the credential store: {error:#}");
        }
    }

    async fn keep(&self, source: &str, principal: &str, answer: Tokened) {
        // An authorization server's word on a lifetime is capped: near 2^64 it would overflow.
        let until = answer.expires_in.map(|s| {
            now().saturating_add(
                s.min(super::MAX_LIFETIME.as_secs())
                    .saturating_sub(REFRESH_BEFORE.as_secs()),
            )
        });
        let kept = Tokens {
            access: answer.access_token,
            refresh: answer.refresh_token,
            until,
        };
        let entry = kept.to_entry(source, principal);
        self.hold(source, principal, kept);
        self.persist();
        if let Keeping::Shared(shared) = &self.keeping
            && shared.put(&entry).await.is_err()
        {
            tracing::warn!(
                source,
                principal,
                "Redis is unreachable: a caller's consent serves on this replica only"
            );
        }
        self.arrived.notify_waiters();
    }

    /// Holds `kept` here, in place of what `principal` had from `source`.
    fn hold(&self, source: &str, principal: &str, kept: Tokens) {
        let mut tokens = self.tokens.lock().unwrap_or_else(|e| e.into_inner());
        if tokens.len() >= MAX_KEPT {
            tokens.retain(|_, t| t.refresh.is_some() || t.fresh());
        }
        tokens.insert((source.to_string(), principal.to_string()), kept);
    }

    /// What this moat holds for `principal` from `source`.
    fn held(&self, source: &str, principal: &str) -> Option<Tokens> {
        let tokens = self.tokens.lock().unwrap_or_else(|e| e.into_inner());
        tokens
            .get(&(source.to_string(), principal.to_string()))
            .cloned()
    }

    /// Stops holding `principal`'s tokens from `source`: whether there were any.
    fn let_go(&self, source: &str, principal: &str) -> bool {
        let mut tokens = self.tokens.lock().unwrap_or_else(|e| e.into_inner());
        tokens
            .remove(&(source.to_string(), principal.to_string()))
            .is_some()
    }

    /// Takes in what Redis holds for `principal` from `source`: tokens that another replica
    /// obtained, refreshed or dropped. False when Redis could not be asked (what this replica
    /// holds serves until it is back).
    async fn look_up(&self, source: &str, principal: &str) -> bool {
        let Keeping::Shared(shared) = &self.keeping else {
            return true;
        };
        match shared.get(source, principal).await {
            Ok(Some(entry)) => {
                let (_, kept) = Tokens::from_entry(entry);
                self.hold(source, principal, kept);
            }
            Ok(None) => {
                self.let_go(source, principal);
            }
            Err(_) => return false,
        }
        true
    }

    /// `principal`'s access token from `source`, refreshed if it expired; `None` when there is
    /// none to be had without the caller.
    pub async fn token(
        &self,
        http: &reqwest::Client,
        source: &str,
        principal: &str,
        settings: &Settings,
    ) -> Option<String> {
        if let Keeping::File(store) = &self.keeping
            && store.changed()
            && let Err(error) = self.reload()
        {
            tracing::error!("could not read the credential store again: {error:#}");
        }
        self.look_up(source, principal).await;
        let kept = self.held(source, principal)?;
        if kept.fresh() {
            return Some(kept.access);
        }
        let Some(mut refresh) = kept.refresh else {
            self.forget(source, principal).await;
            return None;
        };
        // Under [cluster] one replica refreshes at a time: a server that rotates refresh tokens
        // takes each once, and may revoke the whole grant when a used one comes back.
        let mut turn = false;
        if let Keeping::Shared(shared) = &self.keeping {
            match shared.take_refresh_turn(source, principal).await {
                Ok(true) => {
                    // Another replica may have refreshed them since they were read.
                    self.look_up(source, principal).await;
                    match self.held(source, principal) {
                        Some(now) if now.fresh() => {
                            shared.end_refresh_turn(source, principal).await;
                            return Some(now.access);
                        }
                        Some(Tokens {
                            refresh: Some(latest),
                            ..
                        }) => refresh = latest,
                        // Dropped meanwhile (a refresh elsewhere failed): the caller is asked.
                        _ => {
                            shared.end_refresh_turn(source, principal).await;
                            return None;
                        }
                    }
                    turn = true;
                }
                Ok(false) => {
                    if let Some(refreshed) = self.refreshed_elsewhere(source, principal).await {
                        return refreshed;
                    }
                }
                // Redis cannot say: this replica refreshes on its own.
                Err(_) => {}
            }
        }
        let refreshed = self
            .refresh(http, source, principal, settings, refresh)
            .await;
        if let (true, Keeping::Shared(shared)) = (turn, &self.keeping) {
            shared.end_refresh_turn(source, principal).await;
        }
        refreshed
    }

    /// What another replica's refresh of `principal`'s tokens from `source` gave: `Some(None)`
    /// when it failed (the tokens are gone), `None` when it did not end in time.
    async fn refreshed_elsewhere(&self, source: &str, principal: &str) -> Option<Option<String>> {
        for _ in 0..REFRESH_WAIT_STEPS {
            tokio::time::sleep(REFRESH_WAIT_STEP).await;
            if !self.look_up(source, principal).await {
                return None;
            }
            match self.held(source, principal) {
                Some(kept) if kept.fresh() => return Some(Some(kept.access)),
                Some(_) => {}
                None => return Some(None),
            }
        }
        None
    }

    /// Trades `refresh` for new tokens and keeps them; drops them if the server refuses.
    async fn refresh(
        &self,
        http: &reqwest::Client,
        source: &str,
        principal: &str,
        settings: &Settings,
        refresh: String,
    ) -> Option<String> {
        match token_request(
            http,
            settings,
            &[("grant_type", "refresh_token"), ("refresh_token", &refresh)],
        )
        .await
        {
            Ok(mut answer) => {
                // A server that rotates refresh tokens sends a new one; one that does not
                // expects the old one again.
                answer.refresh_token.get_or_insert(refresh);
                let access = answer.access_token.clone();
                self.keep(source, principal, answer).await;
                Some(access)
            }
            Err(why) => {
                tracing::info!(source, "a refresh failed, the caller is asked again: {why}");
                self.forget(source, principal).await;
                None
            }
        }
    }

    /// Waits until some caller's tokens arrive.
    pub async fn arrival(&self) {
        self.arrived.notified().await;
    }

    /// Wakes the calls waiting for tokens: another replica kept some.
    pub fn arrived_elsewhere(&self) {
        self.arrived.notify_waiters();
    }

    /// Drops `principal`'s tokens from `source`.
    pub async fn forget(&self, source: &str, principal: &str) {
        if self.let_go(source, principal) {
            self.persist();
        }
        if let Keeping::Shared(shared) = &self.keeping
            && shared.remove(source, principal).await.is_err()
        {
            tracing::warn!(
                source,
                principal,
                "Redis is unreachable: a refused token is dropped on this replica only"
            );
        }
    }
}

async fn token_request(
    http: &reqwest::Client,
    settings: &Settings,
    form: &[(&str, &str)],
) -> Result<Tokened, String> {
    let endpoint = &settings.token_endpoint;
    let mut form: Vec<(&str, &str)> = form.to_vec();
    let mut request = http.post(endpoint);
    match &settings.client_secret {
        Some(secret) => request = request.basic_auth(&settings.client_id, Some(secret)),
        None => form.push(("client_id", &settings.client_id)),
    }
    let response = request
        .form(&form)
        .send()
        .await
        .map_err(|e| format!("asking {endpoint} for tokens failed: {e}"))?;
    let status = response.status();
    let body = read_capped(response)
        .await
        .map_err(|e| format!("asking {endpoint} for tokens failed: {e}"))?;
    if !status.is_success() {
        let why = match serde_json::from_slice::<Refused>(&body) {
            Ok(r) => super::exchange::plain(&match r.error_description {
                Some(d) => format!("{} ({d})", r.error),
                None => r.error,
            }),
            Err(_) => format!("HTTP {status}"),
        };
        return Err(format!("{endpoint} refused to give tokens: {why}"));
    }
    serde_json::from_slice(&body).map_err(|e| format!("{endpoint} answered no tokens: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> Settings {
        Settings {
            authorization_endpoint: "https://id.example/auth?tenant=1".into(),
            token_endpoint: "http://127.0.0.1:9/token".into(),
            client_id: "moat".into(),
            client_secret: None,
            scope: Some("read".into()),
            resource: None,
            redirect_uri: "https://moat.example/oauth/callback/tracker".into(),
            issuer: None,
            confirm_unproven: false,
        }
    }

    #[tokio::test]
    async fn tokens_are_kept_per_source_and_principal() {
        let consents = Consents::default();
        crate::supply::source::install_tls_provider();
        let http = reqwest::Client::new();
        let answer = |token: &str| Tokened {
            access_token: token.into(),
            refresh_token: None,
            expires_in: Some(3600),
        };
        consents.keep("tracker", "alice", answer("a")).await;
        consents.keep("tracker", "bob", answer("b")).await;
        let settings = settings();
        let token = |p: &'static str| consents.token(&http, "tracker", p, &settings);
        assert_eq!(token("alice").await.as_deref(), Some("a"));
        assert_eq!(token("bob").await.as_deref(), Some("b"));
        assert_eq!(token("carol").await, None);
        consents.forget("tracker", "alice").await;
        assert_eq!(token("alice").await, None);
        // Expired without a refresh token: gone, the caller is asked again.
        consents
            .keep(
                "tracker",
                "bob",
                Tokened {
                    access_token: "b2".into(),
                    refresh_token: None,
                    expires_in: Some(1),
                },
            )
            .await;
        assert_eq!(token("bob").await, None);
        // A lifetime near 2^64 seconds is capped, not an overflow.
        let mut forever = answer("long");
        forever.expires_in = Some(u64::MAX);
        consents.keep("tracker", "carol", forever).await;
        assert_eq!(token("carol").await.as_deref(), Some("long"));
    }
}
