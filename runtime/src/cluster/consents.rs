//! Callers' consent shared by replicas (`[cluster]`): the steps of flows under way, which the
//! browser may take on any replica, the tokens consent gave, which every replica uses, and the
//! turn to refresh them, which one replica holds at a time.
//!
//! Steps and tokens reach Redis sealed (`credential_store`'s key) for the one key they are kept
//! under: a dump of Redis holds no token and no PKCE verifier in clear, and a sealed value copied
//! under another principal's key does not open there. A step is taken with `GETDEL`, so it is
//! good once whichever replicas the browser and an attacker reach; it expires by itself. A token
//! without a refresh token expires with it; one with a refresh token after it goes unused for
//! [`IDLE`]. A turn is ended only by its owner (compare-and-delete), and runs out by itself.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use redis::aio::ConnectionLike;

use super::Cluster;
use crate::shared::consents::{
    Entry, Fallback, KeepError, Keeping, Keepings, Memory, Seal, Settings,
};
use crate::shared::replicas::{Event, Replicas};

/// The prefix of every consented token's key, for `moat credentials` to find them all.
const TOKENS: &str = "moat:consent-token";
/// How long refreshable tokens no replica refreshed or used are kept.
const IDLE: Duration = Duration::from_secs(90 * 24 * 3600);

/// Ends a turn only for its owner.
const END_TURN: &str = r#"
if redis.call("GET", KEYS[1]) == ARGV[1] then
    return redis.call("DEL", KEYS[1])
end
return 0
"#;

/// Where replicas keep consent: with a `credential_store`, in Redis (this replica's copy serving
/// while it cannot be reached); without one, each in its own memory.
pub struct SharedKeepings(pub Arc<Cluster>);

impl Keepings for SharedKeepings {
    fn keeping(&self, store: Option<&Settings>) -> anyhow::Result<Box<dyn Keeping>> {
        let Some(store) = store else {
            return Ok(Box::new(Memory::default()));
        };
        let shared = SharedConsents::new(self.0.clone(), Seal::new(&store.key)?);
        Ok(Box::new(Fallback::new(Box::new(shared))))
    }
}

/// Steps, tokens and turns in Redis, sealed.
pub struct SharedConsents {
    cluster: Arc<Cluster>,
    seal: Seal,
    end_turn: redis::Script,
}

impl SharedConsents {
    pub fn new(cluster: Arc<Cluster>, seal: Seal) -> Self {
        Self {
            cluster,
            seal,
            end_turn: redis::Script::new(END_TURN),
        }
    }

    fn unreachable(&self) -> KeepError {
        KeepError::Unreachable("Redis cannot be reached".into())
    }

    /// `plain` sealed for the Redis key it is kept under.
    fn seal(&self, plain: &[u8], key: &str) -> Result<Vec<u8>, KeepError> {
        self.seal
            .seal(plain, key.as_bytes())
            .map_err(|e| KeepError::Sealing(format!("{e:#}")))
    }

    /// What `command` (`GET`, `GETDEL`) reads at `key`, opened.
    async fn read(&self, command: &str, key: &str) -> Result<Option<Vec<u8>>, KeepError> {
        let sealed = self
            .cluster
            .run(|mut connection| async move {
                redis::cmd(command)
                    .arg(key)
                    .query_async::<Option<Vec<u8>>>(&mut connection)
                    .await
            })
            .await
            .ok_or_else(|| self.unreachable())?;
        sealed
            .map(|sealed| open(&self.seal, sealed, key))
            .transpose()
    }
}

#[async_trait]
impl Keeping for SharedConsents {
    async fn tokens(&self, source: &str, principal: &str) -> Result<Option<Entry>, KeepError> {
        let key = token_key(source, principal);
        self.read("GET", &key)
            .await?
            .map(|plain| decode(&plain))
            .transpose()
    }

    async fn keep(&self, entry: &Entry) -> Result<(), KeepError> {
        let key = token_key(&entry.source, &entry.principal);
        let plain = serde_json::to_vec(entry).map_err(|e| KeepError::Sealing(e.to_string()))?;
        let sealed = self.seal(&plain, &key)?;
        // Without a refresh token an expired token is worth nothing: it goes when it expires.
        let expiry = match (&entry.refresh, entry.refresh_at) {
            (None, Some(at)) => ("EXAT", at.saturating_add(60)),
            _ => ("EX", IDLE.as_secs()),
        };
        self.cluster
            .run(|mut connection| async move {
                redis::cmd("SET")
                    .arg(key)
                    .arg(sealed)
                    .arg(expiry.0)
                    .arg(expiry.1)
                    .query_async::<()>(&mut connection)
                    .await
            })
            .await
            .ok_or_else(|| self.unreachable())?;
        self.cluster.publish(Event::ConsentArrived).await;
        Ok(())
    }

    async fn forget(&self, source: &str, principal: &str) -> Result<bool, KeepError> {
        let key = token_key(source, principal);
        self.cluster
            .run(|connection| delete(connection, key))
            .await
            .ok_or_else(|| self.unreachable())
    }

    async fn all(&self) -> Result<Vec<Entry>, KeepError> {
        let seal = &self.seal;
        self.cluster
            .run(|connection| all(connection, seal))
            .await
            .ok_or_else(|| self.unreachable())
    }

    async fn take_turn(
        &self,
        source: &str,
        principal: &str,
        owner: &str,
        lasts: Duration,
    ) -> Result<bool, KeepError> {
        let key = turn_key(source, principal);
        self.cluster
            .run(|mut connection| async move {
                redis::cmd("SET")
                    .arg(key)
                    .arg(owner)
                    .arg("NX")
                    .arg("PX")
                    .arg(lasts.as_millis().max(1) as u64)
                    .query_async::<Option<String>>(&mut connection)
                    .await
                    .map(|set| set.is_some())
            })
            .await
            .ok_or_else(|| self.unreachable())
    }

    async fn end_turn(&self, source: &str, principal: &str, owner: &str) -> Result<(), KeepError> {
        let key = turn_key(source, principal);
        let script = &self.end_turn;
        self.cluster
            .run(|mut connection| async move {
                script
                    .key(key)
                    .arg(owner)
                    .invoke_async::<i64>(&mut connection)
                    .await
            })
            .await
            .map(|_| ())
            .ok_or_else(|| self.unreachable())
    }

    async fn put_step(&self, key: &str, step: &[u8], lasts: Duration) -> Result<(), KeepError> {
        let key = step_key(key);
        let sealed = self.seal(step, &key)?;
        self.cluster
            .run(|mut connection| async move {
                redis::cmd("SET")
                    .arg(key)
                    .arg(sealed)
                    .arg("PX")
                    .arg(lasts.as_millis().max(1) as u64)
                    .query_async::<()>(&mut connection)
                    .await
            })
            .await
            .ok_or_else(|| self.unreachable())
    }

    async fn take_step(&self, key: &str) -> Result<Option<Vec<u8>>, KeepError> {
        self.read("GETDEL", &step_key(key)).await
    }

    async fn peek_step(&self, key: &str) -> Result<Option<Vec<u8>>, KeepError> {
        self.read("GET", &step_key(key)).await
    }
}

/// Every consented token kept through `connection`, opened with `seal`; those that do not open
/// (another key) are left out, and said so.
async fn all(
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
        match sealed.map(|s| open(seal, s, &key).and_then(|plain| decode(&plain))) {
            Some(Ok(entry)) => entries.push(entry),
            Some(Err(error)) => tracing::warn!("{error}: left out"),
            None => {}
        }
    }
    Ok(entries)
}

/// Drops what is kept under `key`: whether there was anything.
async fn delete(
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
fn token_key(source: &str, principal: &str) -> String {
    super::key(TOKENS, &format!("{source}\0{principal}"))
}

fn turn_key(source: &str, principal: &str) -> String {
    super::key("moat:consent-refresh", &format!("{source}\0{principal}"))
}

fn step_key(key: &str) -> String {
    super::key("moat:consent-link", key)
}

/// What `sealed` holds, if it was sealed with `seal` for `key`.
fn open(seal: &Seal, sealed: Vec<u8>, key: &str) -> Result<Vec<u8>, KeepError> {
    seal.open(sealed, key.as_bytes()).map_err(|_| {
        KeepError::Unreadable(
            "a consent kept in Redis does not open with this moat's credential_store key, or was \
             moved there from another key"
                .into(),
        )
    })
}

fn decode(plain: &[u8]) -> Result<Entry, KeepError> {
    serde_json::from_slice(plain).map_err(|e| KeepError::Unreadable(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::test_redis::redis_server;

    #[tokio::test]
    async fn redis_keeps_every_promise_sealed() {
        let Some(server) = redis_server() else {
            return;
        };
        let cluster = server.cluster();
        let seal = || Seal::new(&"k".repeat(32)).unwrap();
        let shared = SharedConsents::new(cluster.clone(), seal());
        crate::shared::consents::promises::check(&shared).await;
        // Nothing in clear: the token is sealed for its key, and moved to another principal's
        // key it does not open.
        let entry = Entry {
            source: "tracker".into(),
            principal: "alice".into(),
            access: "alice-secret-token".into(),
            refresh: None,
            refresh_at: None,
        };
        shared.keep(&entry).await.unwrap();
        let client = redis::Client::open(server.1.as_str()).unwrap();
        let mut connection = client.get_multiplexed_async_connection().await.unwrap();
        let sealed: Vec<u8> = redis::cmd("GET")
            .arg(token_key("tracker", "alice"))
            .query_async(&mut connection)
            .await
            .unwrap();
        assert!(!String::from_utf8_lossy(&sealed).contains("alice-secret-token"));
        let _: () = redis::cmd("SET")
            .arg(token_key("tracker", "mallory"))
            .arg(sealed)
            .query_async(&mut connection)
            .await
            .unwrap();
        assert!(matches!(
            shared.tokens("tracker", "mallory").await,
            Err(KeepError::Unreadable(_))
        ));
        // A refreshable token is kept for its idle time, not forever.
        let ttl: i64 = redis::cmd("TTL")
            .arg(token_key("tracker", "alice"))
            .query_async(&mut connection)
            .await
            .unwrap();
        assert!(ttl > 0, "{ttl}");
    }
}
