//! A principal's quota across every replica: its request rate is one token bucket in Redis, and
//! each call it runs holds a lease there, so a principal at 60 requests a minute gets 60 however
//! many replicas serve it, and its concurrent calls count wherever they run.
//!
//! Each decision is one script that Redis runs atomically, on Redis' own clock (no replica reads
//! a count and writes it back). A lease lives [`LEASE_TTL`] unless the replica holding it renews
//! it, which a live replica does every third of that: the slots of a replica that died free
//! themselves.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use async_trait::async_trait;
use futures_util::future::BoxFuture;
use redis::Script;

use super::{Cluster, key};
use crate::shared::StoreError;
use crate::shared::quotas::{Held, LOOK_AGAIN, QuotaStore};

/// How long a lease outlives the last renewal of the replica holding it.
pub const LEASE_TTL: Duration = Duration::from_secs(30);

/// Takes one token from a bucket that holds a minute's worth and refills continuously; answers
/// 0, or the milliseconds until the next token.
const TAKE_TOKEN: &str = r"
local capacity = tonumber(ARGV[1])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local state = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(state[1]) or capacity
local at = tonumber(state[2]) or now
local per_ms = capacity / 60000
tokens = math.min(capacity, tokens + math.max(0, now - at) * per_ms)
local wait = 0
if tokens >= 1 then
  tokens = tokens - 1
else
  wait = math.ceil((1 - tokens) / per_ms)
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(now))
redis.call('PEXPIRE', KEYS[1], 60000)
return wait
";

/// Adds lease ARGV[2] to the set of running calls unless it holds ARGV[1] live ones already;
/// answers 1 when it did.
const TAKE_LEASE: &str = r"
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local ttl = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then
  return 0
end
redis.call('ZADD', KEYS[1], now + ttl, ARGV[2])
redis.call('PEXPIRE', KEYS[1], ttl)
return 1
";

/// Moves the expiry of each lease still there (KEYS[i], ARGV[i + 1]) to ARGV[1] ms from now.
const RENEW_LEASES: &str = r"
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local ttl = tonumber(ARGV[1])
for i, key in ipairs(KEYS) do
  redis.call('ZADD', key, 'XX', now + ttl, ARGV[i + 1])
  redis.call('PEXPIRE', key, ttl)
end
return #KEYS
";

/// Quotas decided in Redis, for every replica at once; cloning shares them.
#[derive(Clone)]
pub struct SharedQuotas(Arc<Inner>);

struct Inner {
    cluster: Arc<Cluster>,
    take_token: Script,
    take_lease: Script,
    /// The leases this replica holds: id → key.
    held: Mutex<HashMap<String, String>>,
}

/// A call slot held in Redis until dropped.
struct Lease {
    quotas: Arc<Inner>,
    id: String,
}

fn unreachable() -> StoreError {
    StoreError::Unreachable("Redis does not answer".into())
}

impl SharedQuotas {
    /// Quotas through `cluster`, renewing the leases held here while they live.
    pub fn new(cluster: Arc<Cluster>) -> Self {
        let quotas = Arc::new(Inner {
            cluster,
            take_token: Script::new(TAKE_TOKEN),
            take_lease: Script::new(TAKE_LEASE),
            held: Mutex::default(),
        });
        tokio::spawn(renew(Arc::downgrade(&quotas)));
        Self(quotas)
    }
}

#[async_trait]
impl QuotaStore for SharedQuotas {
    async fn take_token(
        &self,
        principal: &str,
        per_minute: u32,
    ) -> Result<Result<(), Duration>, StoreError> {
        let key = key("moat:quota:rate", principal);
        let wait: u64 = self
            .0
            .cluster
            .run(|mut connection| async move {
                self.0
                    .take_token
                    .key(key)
                    .arg(per_minute)
                    .invoke_async(&mut connection)
                    .await
            })
            .await
            .ok_or_else(unreachable)?;
        Ok(match wait {
            0 => Ok(()),
            ms => Err(Duration::from_millis(ms)),
        })
    }

    async fn take_slot(
        &self,
        principal: &str,
        limit: Option<u32>,
    ) -> Result<Option<Held>, StoreError> {
        // Unlimited calls are counted where they run only.
        let Some(limit) = limit else {
            return Ok(Some(Box::new(())));
        };
        let key = key("moat:quota:calls", principal);
        let id = format!("{}:{}", self.0.cluster.replica(), random_id());
        let taken: u8 = self
            .0
            .cluster
            .run(|mut connection| {
                let (key, id) = (key.clone(), id.clone());
                async move {
                    self.0
                        .take_lease
                        .key(key)
                        .arg(limit)
                        .arg(&id)
                        .arg(LEASE_TTL.as_millis() as u64)
                        .invoke_async(&mut connection)
                        .await
                }
            })
            .await
            .ok_or_else(unreachable)?;
        if taken == 0 {
            return Ok(None);
        }
        let mut held = self.0.held.lock().expect("leases lock");
        held.insert(id.clone(), key);
        self.0.cluster.leases().set(held.len() as i64);
        Ok(Some(Box::new(Lease {
            quotas: self.0.clone(),
            id,
        })))
    }

    fn freed(&self, _: &str) -> BoxFuture<'static, ()> {
        // A call ending on another replica tells nobody here.
        Box::pin(tokio::time::sleep(LOOK_AGAIN))
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let mut held = self.quotas.held.lock().expect("leases lock");
        let Some(key) = held.remove(&self.id) else {
            return;
        };
        self.quotas.cluster.leases().set(held.len() as i64);
        drop(held);
        let (quotas, id) = (self.quotas.clone(), std::mem::take(&mut self.id));
        // Given back at once when Redis answers; otherwise it expires with its TTL.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                quotas
                    .cluster
                    .run(|mut connection| async move {
                        redis::cmd("ZREM")
                            .arg(key)
                            .arg(id)
                            .query_async::<u8>(&mut connection)
                            .await
                    })
                    .await;
            });
        }
    }
}

/// Renews the leases this replica holds, every third of their life, while it serves.
async fn renew(quotas: Weak<Inner>) {
    let script = Script::new(RENEW_LEASES);
    let mut every = tokio::time::interval(LEASE_TTL / 3);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let Some(quotas) = quotas.upgrade() else {
            return;
        };
        let held: Vec<(String, String)> = quotas
            .held
            .lock()
            .expect("leases lock")
            .iter()
            .map(|(id, key)| (id.clone(), key.clone()))
            .collect();
        if held.is_empty() {
            continue;
        }
        quotas
            .cluster
            .run(|mut connection| {
                let mut invocation = script.prepare_invoke();
                invocation.arg(LEASE_TTL.as_millis() as u64);
                for (id, key) in &held {
                    invocation.key(key).arg(id);
                }
                async move { invocation.invoke_async::<u64>(&mut connection).await }
            })
            .await;
    }
}

fn random_id() -> String {
    let mut bytes = [0u8; 12];
    getrandom::fill(&mut bytes).expect("the system's random source");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::test_redis::redis_server;

    #[tokio::test]
    async fn redis_keeps_every_promise() {
        let Some(server) = redis_server() else {
            return;
        };
        crate::shared::quotas::promises::check(&SharedQuotas::new(server.cluster())).await;
    }
}
