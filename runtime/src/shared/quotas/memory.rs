//! Quotas counted in this process.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures_util::future::BoxFuture;
use tokio::sync::watch;

use super::{Held, QuotaStore};
use crate::shared::StoreError;

/// Principals whose counts are kept; past this, idle ones are forgotten (they start afresh).
const MAX_TRACKED: usize = 10_000;

#[derive(Default)]
pub struct Memory {
    used: Mutex<HashMap<String, Arc<Usage>>>,
}

struct Usage {
    bucket: Mutex<Option<Bucket>>,
    /// Calls of this principal running now.
    running: Mutex<u32>,
    /// Bumped when one of them ends.
    ended: watch::Sender<u64>,
}

struct Bucket {
    tokens: f64,
    at: Instant,
}

/// A slot counted here until dropped.
struct Slot(Arc<Usage>);

impl Drop for Slot {
    fn drop(&mut self) {
        *lock(&self.0.running) -= 1;
        self.0.ended.send_modify(|n| *n += 1);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl Memory {
    fn usage(&self, principal: &str) -> Arc<Usage> {
        let mut used = lock(&self.used);
        if let Some(usage) = used.get(principal) {
            return usage.clone();
        }
        if used.len() >= MAX_TRACKED {
            // Only those with nothing running and a full bucket: forgetting them changes nothing.
            let now = Instant::now();
            used.retain(|_, usage| Arc::strong_count(usage) > 1 || !usage.is_idle(now));
        }
        let usage = Arc::new(Usage {
            bucket: Mutex::default(),
            running: Mutex::default(),
            ended: watch::Sender::new(0),
        });
        used.insert(principal.to_string(), usage.clone());
        usage
    }
}

impl Usage {
    fn is_idle(&self, now: Instant) -> bool {
        // A bucket a minute old has refilled, whatever its size.
        let full = lock(&self.bucket)
            .as_ref()
            .is_none_or(|bucket| now.duration_since(bucket.at) >= Duration::from_secs(60));
        full && *lock(&self.running) == 0
    }
}

#[async_trait]
impl QuotaStore for Memory {
    async fn take_token(
        &self,
        principal: &str,
        per_minute: u32,
    ) -> Result<Result<(), Duration>, StoreError> {
        let usage = self.usage(principal);
        let capacity = f64::from(per_minute);
        let per_second = capacity / 60.0;
        let mut bucket = lock(&usage.bucket);
        let now = Instant::now();
        let bucket = bucket.get_or_insert(Bucket {
            tokens: capacity,
            at: now,
        });
        let refilled = bucket.tokens + now.duration_since(bucket.at).as_secs_f64() * per_second;
        bucket.tokens = refilled.min(capacity);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            return Ok(Ok(()));
        }
        let wait = Duration::from_secs_f64((1.0 - bucket.tokens) / per_second);
        Ok(Err(wait))
    }

    async fn take_slot(
        &self,
        principal: &str,
        limit: Option<u32>,
    ) -> Result<Option<Held>, StoreError> {
        let usage = self.usage(principal);
        let mut running = lock(&usage.running);
        if limit.is_some_and(|limit| *running >= limit) {
            return Ok(None);
        }
        *running += 1;
        drop(running);
        Ok(Some(Box::new(Slot(usage))))
    }

    fn freed(&self, principal: &str) -> BoxFuture<'static, ()> {
        // Subscribed now: a slot given back between this and the await still wakes it.
        let mut ended = self.usage(principal).ended.subscribe();
        Box::pin(async move {
            let _ = ended.changed().await;
        })
    }
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn memory_keeps_every_promise() {
        super::super::promises::check(&super::Memory::default()).await;
    }
}
