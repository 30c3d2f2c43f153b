//! The caller's consent at a third party: an OAuth 2.1 authorization-code flow with PKCE,
//! started by a URL the caller's client opens (URL elicitation) and ended at moat's callback
//! for that source ([`steps`] says how a link connects only the person it was made for).
//! The tokens it yields are kept per source and principal (`shared::consents` says where), and
//! refreshed with the refresh token when they expire: by one call at a time, whichever replica
//! it runs on, since a server that rotates refresh tokens takes each once and may revoke the
//! whole grant when a used one comes back (RFC 9700 §4.14.2).

use std::time::{Duration, Instant};

use self::endpoint::{Failure, Tokened};
pub use self::steps::{Answer, Link, Proof, Step};
use crate::shared::consents::{Entry, KeepError, Keeping, Memory};

mod endpoint;
pub mod steps;
#[cfg(test)]
mod tests;

/// How long a link, and each step after it, may wait for the caller.
const LINK_LIFETIME: Duration = Duration::from_secs(600);
/// How long before its expiry a token is refreshed.
const REFRESH_BEFORE: Duration = Duration::from_secs(30);
/// How long one call's turn to refresh lasts at most: longer than its token request may take.
const REFRESH_TURN: Duration = Duration::from_secs(15);
/// How often a call waiting for another's refresh looks for what it got.
const REFRESH_WAIT_STEP: Duration = Duration::from_millis(100);

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

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Whether `entry`'s access token is still good to send.
fn fresh(entry: &Entry) -> bool {
    entry.refresh_at.is_none_or(|at| now() < at)
}

/// What a principal's tokens from a source call for.
enum Due {
    /// This access token, or none to be had without the caller.
    Now(Option<String>),
    /// A refresh, with this refresh token.
    Refresh(String),
}

/// What came of waiting for another call's refresh.
enum Waited {
    Fresh(String),
    /// Dropped (the grant was refused): the caller is asked.
    Gone,
    /// Still stale when the other's turn ran out.
    Stale,
}

/// Callers' consented tokens and the flows that give them, kept by one [`Keeping`].
pub struct Consents {
    keeping: Box<dyn Keeping>,
    /// Woken whenever a caller's tokens arrive.
    arrived: tokio::sync::Notify,
}

impl Default for Consents {
    fn default() -> Self {
        Self::new(Box::new(Memory::default()))
    }
}

impl Consents {
    pub fn new(keeping: Box<dyn Keeping>) -> Self {
        Self {
            keeping,
            arrived: tokio::sync::Notify::new(),
        }
    }

    /// Keeps the tokens the token endpoint gave `principal` from `source`.
    async fn keep(&self, source: &str, principal: &str, answer: Tokened) {
        // An authorization server's word on a lifetime is capped: near 2^64 it would overflow.
        let refresh_at = answer.expires_in.map(|s| {
            now().saturating_add(
                s.min(super::MAX_LIFETIME.as_secs())
                    .saturating_sub(REFRESH_BEFORE.as_secs()),
            )
        });
        let entry = Entry {
            source: source.to_string(),
            principal: principal.to_string(),
            access: answer.access_token,
            refresh: answer.refresh_token,
            refresh_at,
        };
        if let Err(error) = self.keeping.keep(&entry).await {
            tracing::error!(
                source,
                principal,
                "a caller's tokens were not kept: {error}"
            );
        }
        self.arrived.notify_waiters();
    }

    /// What `principal` holds from `source`; a record that does not read back counts as none
    /// (the caller is asked again), and says so.
    async fn held(&self, source: &str, principal: &str) -> Result<Option<Entry>, String> {
        match self.keeping.tokens(source, principal).await {
            Ok(entry) => Ok(entry),
            Err(KeepError::Unreadable(why)) => {
                tracing::warn!(source, principal, "{why}: the caller is asked again");
                Ok(None)
            }
            Err(error) => Err(error.to_string()),
        }
    }

    /// What `principal` holds from `source` now: a token to send, none (an expired one without
    /// a refresh token is dropped), or the refresh token to trade.
    async fn due(&self, source: &str, principal: &str) -> Result<Due, String> {
        let Some(entry) = self.held(source, principal).await? else {
            return Ok(Due::Now(None));
        };
        if fresh(&entry) {
            return Ok(Due::Now(Some(entry.access)));
        }
        match entry.refresh {
            Some(refresh) => Ok(Due::Refresh(refresh)),
            None => {
                self.forget(source, principal).await;
                Ok(Due::Now(None))
            }
        }
    }

    /// `principal`'s access token from `source`, refreshed if it expired; `Ok(None)` when
    /// there is none to be had without the caller, an error when one may be had later (the
    /// token endpoint or the store could not be reached: the next call tries again).
    pub async fn token(
        &self,
        http: &reqwest::Client,
        source: &str,
        principal: &str,
        settings: &Settings,
    ) -> Result<Option<String>, String> {
        if let Due::Now(token) = self.due(source, principal).await? {
            return Ok(token);
        }
        let owner = steps::random::<12>()?;
        // Two turns' time: a turn that ran out (its holder died) is taken over once.
        let give_up = Instant::now() + 2 * REFRESH_TURN;
        loop {
            let turn = self
                .keeping
                .take_turn(source, principal, &owner, REFRESH_TURN)
                .await
                .map_err(|e| e.to_string())?;
            if turn {
                let refreshed = self.refresh(http, source, principal, settings).await;
                if let Err(error) = self.keeping.end_turn(source, principal, &owner).await {
                    tracing::warn!(
                        source,
                        principal,
                        "a refresh turn runs out by itself: {error}"
                    );
                }
                return refreshed;
            }
            match self.refreshed_elsewhere(source, principal).await? {
                Waited::Fresh(access) => return Ok(Some(access)),
                Waited::Gone => return Ok(None),
                Waited::Stale if Instant::now() < give_up => {}
                Waited::Stale => {
                    return Err(
                        "another call's refresh of the caller's token did not end; the \
                                next call tries again"
                            .into(),
                    );
                }
            }
        }
    }

    /// What another call's refresh of `principal`'s tokens from `source` gave, waiting as long
    /// as its turn may last.
    async fn refreshed_elsewhere(&self, source: &str, principal: &str) -> Result<Waited, String> {
        let until = Instant::now() + REFRESH_TURN;
        while Instant::now() < until {
            tokio::time::sleep(REFRESH_WAIT_STEP).await;
            match self.held(source, principal).await? {
                Some(entry) if fresh(&entry) => return Ok(Waited::Fresh(entry.access)),
                Some(_) => {}
                None => return Ok(Waited::Gone),
            }
        }
        Ok(Waited::Stale)
    }

    /// Refreshes `principal`'s tokens from `source`, holding the turn: read again first (the
    /// last holder may have just refreshed them), then traded and kept. Dropped only when the
    /// server says the grant is no good; any other failure keeps them for the next call.
    async fn refresh(
        &self,
        http: &reqwest::Client,
        source: &str,
        principal: &str,
        settings: &Settings,
    ) -> Result<Option<String>, String> {
        let refresh = match self.due(source, principal).await? {
            Due::Now(token) => return Ok(token),
            Due::Refresh(refresh) => refresh,
        };
        let form = [
            ("grant_type", "refresh_token"),
            ("refresh_token", &*refresh),
        ];
        match endpoint::request(http, settings, &form).await {
            Ok(mut answer) => {
                // A server that rotates refresh tokens sends a new one; one that does not
                // expects the old one again.
                answer.refresh_token.get_or_insert(refresh);
                let access = answer.access_token.clone();
                self.keep(source, principal, answer).await;
                Ok(Some(access))
            }
            Err(Failure::Grant(why)) => {
                tracing::info!(
                    source,
                    principal,
                    "a refresh was refused, the caller is asked again: {why}"
                );
                self.forget(source, principal).await;
                Ok(None)
            }
            Err(Failure::Failed(why)) => {
                tracing::warn!(
                    source,
                    principal,
                    "a refresh failed, the tokens are kept: {why}"
                );
                Err(format!(
                    "the caller's token could not be refreshed ({why}); the next call tries again"
                ))
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

    /// The upstream refused `access`, `principal`'s token from `source`: the next request
    /// refreshes it, and asks the caller only if that fails. A token that cannot be refreshed
    /// is dropped; one another call has replaced meanwhile is left alone.
    pub async fn refused(&self, source: &str, principal: &str, access: &str) {
        let held = match self.held(source, principal).await {
            Ok(Some(entry)) if entry.access == access => entry,
            _ => return,
        };
        if held.refresh.is_none() {
            self.forget(source, principal).await;
            return;
        }
        let stale = Entry {
            refresh_at: Some(0),
            ..held
        };
        if let Err(error) = self.keeping.keep(&stale).await {
            tracing::warn!(source, principal, "a refused token is still held: {error}");
        }
    }

    /// Who holds tokens from which source, and whether they can be refreshed, by principal
    /// and source; never the tokens.
    pub async fn held_by_all(&self) -> Result<Vec<(String, String, bool)>, String> {
        let mut held: Vec<(String, String, bool)> = (self.keeping.all().await)
            .map_err(|e| e.to_string())?
            .into_iter()
            .map(|entry| (entry.principal, entry.source, entry.refresh.is_some()))
            .collect();
        held.sort();
        Ok(held)
    }

    /// Drops `principal`'s tokens from `source`.
    pub async fn forget(&self, source: &str, principal: &str) {
        if let Err(error) = self.keeping.forget(source, principal).await {
            tracing::warn!(
                source,
                principal,
                "a caller's tokens were not dropped: {error}"
            );
        }
    }
}
