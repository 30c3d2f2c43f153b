//! The caller's consent at a third party: an OAuth 2.1 authorization-code flow with PKCE,
//! started by a URL the caller's client opens (URL elicitation) and ended at moat's callback.
//!
//! A link is good once, for ten minutes, for the principal and source it was made for: its
//! `state` is 128 random bits that only that principal's client was given, and the PKCE
//! verifier never leaves moat, so a code without it is worth nothing. The tokens it yields are
//! kept per source and principal, and refreshed with the refresh token when they expire.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::shared::SharedConsents;
use super::store::{Entry, Store};
use crate::access::oauth::body::read_capped;

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
    /// moat's callback, as the third party knows it.
    pub redirect_uri: String,
}

/// A link made for one principal and source, waiting for the caller.
#[derive(Serialize, Deserialize)]
struct Waiting {
    source: String,
    principal: String,
    verifier: String,
}

/// A link waiting here, until its time is up.
struct Pending {
    waiting: Waiting,
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

/// What the caller is sent to, and the question that sends it.
pub struct Link {
    pub url: String,
    /// Names the URL elicitation, so that its completion can be announced.
    pub elicitation_id: String,
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
    /// Links made here that no other replica can end (Redis was unreachable, or there is none).
    pending: Mutex<HashMap<String, Pending>>,
    tokens: Mutex<HashMap<(String, String), Tokens>>,
    /// Woken whenever a caller's tokens arrive.
    arrived: tokio::sync::Notify,
    keeping: Keeping,
}

/// What a token endpoint answers.
#[derive(Deserialize)]
struct Answer {
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

    /// A new link for `principal` to give `source`'s tokens.
    pub async fn link(
        &self,
        source: &str,
        principal: &str,
        settings: &Settings,
    ) -> Result<Link, String> {
        let state = random::<16>()?;
        // RFC 7636: 43 to 128 characters.
        let verifier = random::<32>()?;
        let challenge = URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()));
        let mut url = reqwest::Url::parse(&settings.authorization_endpoint)
            .map_err(|e| format!("the authorization endpoint is not a URL: {e}"))?;
        {
            let mut query = url.query_pairs_mut();
            query
                .append_pair("response_type", "code")
                .append_pair("client_id", &settings.client_id)
                .append_pair("redirect_uri", &settings.redirect_uri)
                .append_pair("state", &state)
                .append_pair("code_challenge", &challenge)
                .append_pair("code_challenge_method", "S256");
            if let Some(scope) = &settings.scope {
                query.append_pair("scope", scope);
            }
            if let Some(resource) = &settings.resource {
                query.append_pair("resource", resource);
            }
        }
        let waiting = Waiting {
            source: source.to_string(),
            principal: principal.to_string(),
            verifier,
        };
        let link = Link {
            url: url.into(),
            elicitation_id: random::<16>()?,
        };
        if let Keeping::Shared(shared) = &self.keeping {
            match shared.put_link(&state, &waiting, LINK_LIFETIME).await {
                Ok(()) => return Ok(link),
                Err(_) => tracing::warn!(
                    "Redis is unreachable: a consent link is kept on this replica only, and \
                     ends only if the caller's browser comes back here"
                ),
            }
        }
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        if pending.len() >= MAX_PENDING {
            let now = Instant::now();
            pending.retain(|_, p| now < p.until);
            if pending.len() >= MAX_PENDING
                && let Some(oldest) = pending
                    .iter()
                    .min_by_key(|(_, p)| p.until)
                    .map(|(k, _)| k.clone())
            {
                pending.remove(&oldest);
            }
        }
        pending.insert(
            state,
            Pending {
                waiting,
                until: Instant::now() + LINK_LIFETIME,
            },
        );
        Ok(link)
    }

    /// The source and principal a callback's `state` was made for, taken once: a second use of
    /// the same state, a state moat never made and one past its time are all refused.
    async fn take(&self, state: &str) -> Option<Waiting> {
        let here = {
            let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            pending.remove(state)
        };
        if let Some(pending) = here {
            return (Instant::now() < pending.until).then_some(pending.waiting);
        }
        match &self.keeping {
            Keeping::Shared(shared) => shared.take_link(state).await.ok().flatten(),
            _ => None,
        }
    }

    /// Ends the flow `state` began with `code`: asks the token endpoint of its source (found by
    /// `settings`) and keeps the tokens. Gives back the source and principal.
    pub async fn complete(
        &self,
        http: &reqwest::Client,
        state: &str,
        code: &str,
        settings: impl Fn(&str) -> Option<Settings>,
    ) -> Result<(String, String), String> {
        let pending = self
            .take(state)
            .await
            .ok_or("this link was used already, has expired, or was not made by this moat")?;
        let settings = settings(&pending.source).ok_or_else(|| {
            format!(
                "the credential source \"{}\" is no longer configured",
                pending.source
            )
        })?;
        let answer = token_request(
            http,
            &settings,
            &[
                ("grant_type", "authorization_code"),
                ("code", code),
                ("redirect_uri", &settings.redirect_uri),
                ("code_verifier", &pending.verifier),
            ],
        )
        .await?;
        self.keep(&pending.source, &pending.principal, answer).await;
        Ok((pending.source, pending.principal))
    }

    async fn keep(&self, source: &str, principal: &str, answer: Answer) {
        let until = answer
            .expires_in
            .map(|s| now() + s.saturating_sub(REFRESH_BEFORE.as_secs()));
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
) -> Result<Answer, String> {
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

/// `N` random bytes, base64url.
fn random<const N: usize>() -> Result<String, String> {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes).map_err(|e| format!("no randomness: {e}"))?;
    Ok(URL_SAFE_NO_PAD.encode(bytes))
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
            redirect_uri: "https://moat.example/oauth/callback".into(),
        }
    }

    #[tokio::test]
    async fn a_link_carries_a_fresh_state_and_an_s256_challenge() {
        let consents = Consents::default();
        let link = consents
            .link("tracker", "alice", &settings())
            .await
            .unwrap();
        let url = reqwest::Url::parse(&link.url).unwrap();
        let query: HashMap<String, String> = url.query_pairs().into_owned().collect();
        assert_eq!(query["tenant"], "1");
        assert_eq!(query["response_type"], "code");
        assert_eq!(query["code_challenge_method"], "S256");
        assert_eq!(query["redirect_uri"], "https://moat.example/oauth/callback");
        assert_eq!(query["scope"], "read");
        let state = &query["state"];
        let pending = consents.take(state).await.unwrap();
        assert_eq!(
            (&*pending.source, &*pending.principal),
            ("tracker", "alice")
        );
        assert_eq!(pending.verifier.len(), 43);
        assert_eq!(
            query["code_challenge"],
            URL_SAFE_NO_PAD.encode(Sha256::digest(pending.verifier.as_bytes()))
        );
        // Once only; and a state moat never made is nothing.
        assert!(consents.take(state).await.is_none());
        assert!(consents.take("made-up").await.is_none());
        let other = consents
            .link("tracker", "alice", &settings())
            .await
            .unwrap();
        assert_ne!(other.url, link.url);
        assert_ne!(other.elicitation_id, link.elicitation_id);
    }

    #[tokio::test]
    async fn a_link_past_its_time_is_refused() {
        let consents = Consents::default();
        let link = consents
            .link("tracker", "alice", &settings())
            .await
            .unwrap();
        let url = reqwest::Url::parse(&link.url).unwrap();
        let state = url
            .query_pairs()
            .find(|(k, _)| k == "state")
            .unwrap()
            .1
            .into_owned();
        consents
            .pending
            .lock()
            .unwrap()
            .get_mut(&state)
            .unwrap()
            .until = Instant::now();
        assert!(consents.take(&state).await.is_none());
    }

    #[tokio::test]
    async fn tokens_are_kept_per_source_and_principal() {
        let consents = Consents::default();
        crate::supply::source::install_tls_provider();
        let http = reqwest::Client::new();
        let answer = |token: &str| Answer {
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
                Answer {
                    access_token: "b2".into(),
                    refresh_token: None,
                    expires_in: Some(1),
                },
            )
            .await;
        assert_eq!(token("bob").await, None);
    }
}
