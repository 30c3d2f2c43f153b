//! A principal's quota across every replica: its request rate is one token bucket in Redis, and
//! each call it runs holds a lease there, so a principal at 60 requests a minute gets 60 however
//! many replicas serve it, and its concurrent calls count wherever they run.
//!
//! Each decision is one script that Redis runs atomically, on Redis' own clock (no replica reads
//! a count and writes it back). A lease lives [`LEASE_TTL`] unless the replica holding it renews
//! it, which a live replica does every third of that: the slots of a replica that died free
//! themselves.
//!
//! A high rate would cost a round trip per request: a replica takes a principal's tokens from
//! the bucket in batches of up to a tenth of a second's worth ([`batch_for`], at most
//! [`MAX_BATCH`]), spends them over at most [`RESERVE_FOR`], and gives back what it did not
//! spend with its next batch. No token is spent twice, so the replicas together never admit more
//! than the rate; a replica may hold at most one batch that others cannot use meanwhile (under
//! 600 a minute a batch is one token: decided in Redis request by request, exactly).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures_util::future::BoxFuture;
use redis::Script;

use super::{Cluster, key};
use crate::shared::StoreError;
use crate::shared::quotas::{Held, LOOK_AGAIN, QuotaStore};

/// Principals whose reserves are kept at most; past this the stale ones go.
const MAX_RESERVES: usize = 10_000;

/// How long a lease outlives the last renewal of the replica holding it.
pub const LEASE_TTL: Duration = Duration::from_secs(30);

/// The most tokens a replica takes at once.
pub const MAX_BATCH: u32 = 32;
/// How long a replica may spend a batch before what is left goes back.
pub const RESERVE_FOR: Duration = Duration::from_secs(1);

/// How many tokens a replica takes at once at `per_minute`: a tenth of a second's worth.
pub fn batch_for(per_minute: u32) -> u32 {
    (per_minute / 600).clamp(1, MAX_BATCH)
}

/// Gives back ARGV[3] unspent tokens, then takes up to ARGV[2] from a bucket that holds a
/// minute's worth (ARGV[1]) and refills continuously; answers {tokens taken, 0}, or {0, the
/// milliseconds until the next token}.
const TAKE_TOKENS: &str = r"
local capacity = tonumber(ARGV[1])
local want, back = tonumber(ARGV[2]), tonumber(ARGV[3])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local state = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(state[1]) or capacity
local at = tonumber(state[2]) or now
local per_ms = capacity / 60000
tokens = math.min(capacity, tokens + back + math.max(0, now - at) * per_ms)
local taken, wait = 0, 0
if tokens >= 1 then
  taken = math.min(want, math.floor(tokens))
  tokens = tokens - taken
else
  wait = math.ceil((1 - tokens) / per_ms)
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(now))
redis.call('PEXPIRE', KEYS[1], 60000)
return {taken, wait}
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
    take_tokens: Script,
    take_lease: Script,
    /// Tokens this replica took and has not spent yet: principal → how many, and until when.
    reserves: Mutex<HashMap<String, (u32, Instant)>>,
    /// Round trips for tokens, for the tests.
    #[cfg(test)]
    asked: std::sync::atomic::AtomicU64,
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
            take_tokens: Script::new(TAKE_TOKENS),
            take_lease: Script::new(TAKE_LEASE),
            reserves: Mutex::default(),
            #[cfg(test)]
            asked: Default::default(),
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
        // Spent from this replica's reserve while it lasts; what is left of a stale one goes back.
        let back = {
            let mut reserves = self.0.reserves.lock().expect("reserves lock");
            match reserves.get_mut(principal) {
                Some((left, until)) if *left > 0 && Instant::now() < *until => {
                    *left -= 1;
                    return Ok(Ok(()));
                }
                Some(_) => reserves.remove(principal).map_or(0, |(left, _)| left),
                None => 0,
            }
        };
        let key = key("moat:quota:rate", principal);
        let batch = batch_for(per_minute);
        #[cfg(test)]
        self.0
            .asked
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (taken, wait): (u32, u64) = self
            .0
            .cluster
            .run(|mut connection| async move {
                self.0
                    .take_tokens
                    .key(key)
                    .arg(per_minute)
                    .arg(batch)
                    .arg(back)
                    .invoke_async(&mut connection)
                    .await
            })
            .await
            .ok_or_else(unreachable)?;
        if taken == 0 {
            return Ok(Err(Duration::from_millis(wait.max(1))));
        }
        if taken > 1 {
            let mut reserves = self.0.reserves.lock().expect("reserves lock");
            let now = Instant::now();
            if reserves.len() >= MAX_RESERVES {
                reserves.retain(|_, (_, until)| now < *until);
            }
            let (left, until) = reserves.entry(principal.to_string()).or_insert((0, now));
            *left += taken - 1;
            *until = now + RESERVE_FOR;
        }
        Ok(Ok(()))
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

    #[tokio::test]
    async fn a_high_rate_is_taken_in_batches_and_replicas_never_admit_more_than_the_bucket() {
        let Some(server) = redis_server() else {
            return;
        };
        let per_minute = 600 * MAX_BATCH;
        assert_eq!(batch_for(per_minute), MAX_BATCH);
        let cluster = server.cluster();
        let replicas = [
            SharedQuotas::new(cluster.clone()),
            SharedQuotas::new(cluster),
        ];
        let started = std::time::Instant::now();
        let mut admitted = 0u64;
        // Both replicas ask in turn until both are refused: the bucket is spent.
        loop {
            let mut refused = 0;
            for replica in &replicas {
                match replica.take_token("ada", per_minute).await.unwrap() {
                    Ok(()) => admitted += 1,
                    Err(_) => refused += 1,
                }
            }
            if refused == replicas.len() {
                break;
            }
        }
        let refilled = started.elapsed().as_secs_f64() * f64::from(per_minute) / 60.0;
        let capacity = u64::from(per_minute);
        assert!(
            admitted as f64 <= capacity as f64 + refilled.ceil() + 1.0,
            "{admitted} admitted from a bucket of {capacity} (+{refilled:.0} refilled)"
        );
        assert!(admitted >= capacity, "{admitted} of {capacity}");
        let asked: u64 = replicas
            .iter()
            .map(|r| r.0.asked.load(std::sync::atomic::Ordering::Relaxed))
            .sum();
        // One per batch, and the refusals: a round trip per request without batches.
        assert!(
            asked <= admitted / u64::from(MAX_BATCH / 2),
            "{asked} round trips for {admitted} requests"
        );
        println!("{admitted} admitted by two replicas with {asked} round trips to Redis");
    }
}
