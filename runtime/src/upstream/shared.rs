//! Callers' consent shared by replicas (`[cluster]`): the links waiting for a caller's browser,
//! which may come back to any replica, and the tokens consent gave, which every replica uses.
//!
//! Both reach Redis sealed (`credential_store`'s key) for the one key they are kept under: a
//! dump of Redis holds no token and no PKCE verifier in clear, and a sealed value copied under
//! another principal's key does not open there. A link is taken with `GETDEL`, so it is good
//! once whichever replicas the browser and an attacker reach; it expires by itself. A token
//! without a refresh token expires with it; one with a refresh token stays until revoked.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionLike;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::store::{Entry, Seal};
use crate::cluster::events::Event;
use crate::cluster::{Cluster, tasks::Unreachable};

/// The prefix of every consented token's key, for `moat credentials` to find them all.
const TOKENS: &str = "moat:consent-token";
/// How long one replica's turn to refresh a principal's tokens lasts at most.
const REFRESH_TURN: Duration = Duration::from_secs(10);

/// Links and tokens in Redis, sealed.
pub struct SharedConsents {
    cluster: Arc<Cluster>,
    seal: Seal,
}

impl SharedConsents {
    pub fn new(cluster: Arc<Cluster>, seal: Seal) -> Self {
        Self { cluster, seal }
    }

    /// Keeps `link` under `state` for `lifetime`.
    pub async fn put_link<T: Serialize>(
        &self,
        state: &str,
        link: &T,
        lifetime: Duration,
    ) -> Result<(), Unreachable> {
        let key = link_key(state);
        let sealed = seal(&self.seal, link, &key).ok_or(Unreachable)?;
        self.cluster
            .run(|mut connection| async move {
                redis::cmd("SET")
                    .arg(key)
                    .arg(sealed)
                    .arg("PX")
                    .arg(lifetime.as_millis() as u64)
                    .query_async::<()>(&mut connection)
                    .await
            })
            .await
            .ok_or(Unreachable)
    }

    /// The link kept under `state`, taken: no replica finds it again.
    pub async fn take_link<T: DeserializeOwned>(
        &self,
        state: &str,
    ) -> Result<Option<T>, Unreachable> {
        self.read("GETDEL", &link_key(state)).await
    }

    /// The link kept under `state`, left for the next step to take.
    pub async fn peek_link<T: DeserializeOwned>(
        &self,
        state: &str,
    ) -> Result<Option<T>, Unreachable> {
        self.read("GET", &link_key(state)).await
    }

    /// Keeps `entry`, in place of what its principal had from its source.
    pub async fn put(&self, entry: &Entry) -> Result<(), Unreachable> {
        let key = token_key(&entry.source, &entry.principal);
        let sealed = seal(&self.seal, entry, &key).ok_or(Unreachable)?;
        // Without a refresh token an expired token is worth nothing: it goes when it expires.
        let expires_at = match (&entry.refresh, entry.refresh_at) {
            (None, Some(at)) => Some(at + 60),
            _ => None,
        };
        self.cluster
            .run(|mut connection| async move {
                let mut set = redis::cmd("SET");
                set.arg(key).arg(sealed);
                if let Some(at) = expires_at {
                    set.arg("EXAT").arg(at);
                }
                set.query_async::<()>(&mut connection).await
            })
            .await
            .ok_or(Unreachable)?;
        self.cluster.publish(Event::ConsentArrived).await;
        Ok(())
    }

    /// What `principal` has from `source`: `Ok(None)` when nothing (or nothing that opens).
    pub async fn get(&self, source: &str, principal: &str) -> Result<Option<Entry>, Unreachable> {
        self.read("GET", &token_key(source, principal)).await
    }

    /// Whether this replica may refresh `principal`'s tokens from `source` now: no other
    /// replica is (for ten seconds at most, should it die meanwhile).
    pub async fn take_refresh_turn(
        &self,
        source: &str,
        principal: &str,
    ) -> Result<bool, Unreachable> {
        let key = refresh_key(source, principal);
        let instance = self.cluster.instance().to_string();
        self.cluster
            .run(|mut connection| async move {
                redis::cmd("SET")
                    .arg(key)
                    .arg(instance)
                    .arg("NX")
                    .arg("PX")
                    .arg(REFRESH_TURN.as_millis() as u64)
                    .query_async::<Option<String>>(&mut connection)
                    .await
                    .map(|set| set.is_some())
            })
            .await
            .ok_or(Unreachable)
    }

    /// Ends this replica's turn to refresh (the key expires by itself if this fails).
    pub async fn end_refresh_turn(&self, source: &str, principal: &str) {
        let key = refresh_key(source, principal);
        self.cluster.run(|connection| delete(connection, key)).await;
    }

    /// What `command` (`GET`, `GETDEL`) reads at `key`, opened.
    async fn read<T: DeserializeOwned>(
        &self,
        command: &str,
        key: &str,
    ) -> Result<Option<T>, Unreachable> {
        let sealed = self
            .cluster
            .run(|mut connection| async move {
                redis::cmd(command)
                    .arg(key)
                    .query_async::<Option<Vec<u8>>>(&mut connection)
                    .await
            })
            .await
            .ok_or(Unreachable)?;
        Ok(sealed.and_then(|sealed| open(&self.seal, sealed, key)))
    }

    /// Drops what `principal` has from `source`.
    pub async fn remove(&self, source: &str, principal: &str) -> Result<(), Unreachable> {
        let key = token_key(source, principal);
        self.cluster
            .run(|connection| delete(connection, key))
            .await
            .map(|_| ())
            .ok_or(Unreachable)
    }
}

/// Every consented token kept through `connection`, opened with `seal`; those that do not open
/// (another key) are left out.
pub async fn all(
    mut connection: impl ConnectionLike + Send,
    seal: &Seal,
) -> redis::RedisResult<Vec<Entry>> {
    let keys: Vec<String> = {
        let mut iter = redis::cmd("SCAN")
            .cursor_arg(0)
            .arg("MATCH")
            .arg(format!("{TOKENS}:*"))
            .arg("COUNT")
            .arg(1000)
            .clone()
            .iter_async::<String>(&mut connection)
            .await?;
        let mut keys = Vec::new();
        while let Some(key) = futures_util::StreamExt::next(&mut iter).await {
            keys.push(key?);
        }
        keys
    };
    let mut entries = Vec::new();
    for key in keys {
        let sealed: Option<Vec<u8>> = redis::cmd("GET")
            .arg(&key)
            .query_async(&mut connection)
            .await?;
        if let Some(entry) = sealed.and_then(|s| open::<Entry>(seal, s, &key)) {
            entries.push(entry);
        }
    }
    Ok(entries)
}

/// Drops what is kept under `key` (a [`token_key`], a refresh turn) through `connection`:
/// whether there was anything.
pub async fn delete(
    mut connection: impl ConnectionLike + Send,
    key: String,
) -> redis::RedisResult<bool> {
    redis::cmd("DEL")
        .arg(key)
        .query_async::<i64>(&mut connection)
        .await
        .map(|removed| removed > 0)
}

/// The key of `principal`'s token from `source`.
pub fn token_key(source: &str, principal: &str) -> String {
    crate::cluster::key(TOKENS, &format!("{source}\0{principal}"))
}

fn refresh_key(source: &str, principal: &str) -> String {
    crate::cluster::key("moat:consent-refresh", &format!("{source}\0{principal}"))
}

fn link_key(state: &str) -> String {
    crate::cluster::key("moat:consent-link", state)
}

/// `value` sealed for the Redis key it is kept under.
fn seal<T: Serialize>(seal: &Seal, value: &T, key: &str) -> Option<Vec<u8>> {
    let plain = serde_json::to_vec(value).ok()?;
    match seal.seal(&plain, key.as_bytes()) {
        Ok(sealed) => Some(sealed),
        Err(error) => {
            tracing::error!("could not seal a consent for Redis: {error:#}");
            None
        }
    }
}

/// What `sealed` holds, if it was sealed with `seal` for `key`.
fn open<T: DeserializeOwned>(seal: &Seal, sealed: Vec<u8>, key: &str) -> Option<T> {
    match seal.open(sealed, key.as_bytes()) {
        Ok(plain) => serde_json::from_slice(&plain).ok(),
        Err(_) => {
            tracing::warn!(
                "a consent kept in Redis does not open with this moat's credential_store key, \
                 or was moved there from another key: ignored"
            );
            None
        }
    }
}
