//! How much each principal may ask of moat: requests per minute (a token bucket that holds a
//! minute's worth) and calls at once. Each principal has its own, so one noisy agent exhausts
//! only its own quota.
//!
//! A call slot ([`Slot`]) is held for as long as the principal's guest code runs, whatever
//! started it (a tool call, a prompt, a resource read, a completion, a task), not for the life
//! of the request that asked. The quotas can be changed while moat serves
//! ([`Quotas::configure`]): the next request is measured against the new ones, and the calls
//! already running count towards them.
//!
//! Replicas that share state ([`Quotas::share`]) decide in Redis, for all of them at once: a
//! principal's rate there, and its call slots as leases there on top of the count each replica
//! keeps. While Redis cannot be reached, each replica decides alone.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::cluster::quotas::{Lease, SharedQuotas};

/// One principal's quota; `None` is no limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Quota {
    pub requests_per_minute: Option<u32>,
    pub concurrent_calls: Option<u32>,
}

/// Why a request was turned away.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exceeded {
    /// Too many requests this minute; one more fits after `retry_after`.
    Rate { retry_after: Duration },
    /// As many calls as allowed are running.
    Concurrency { limit: u32 },
}

impl Exceeded {
    /// What `principal` is told.
    pub fn message(&self, principal: &str) -> String {
        match self {
            Exceeded::Rate { retry_after } => format!(
                "{principal} is over its request rate; retry in {} s",
                retry_seconds(*retry_after)
            ),
            Exceeded::Concurrency { limit } => format!(
                "{principal} already has {limit} calls running, as many as its quota allows; \
                 retry when one has finished"
            ),
        }
    }

    /// When to try again, in whole seconds (at least one).
    pub fn retry_after_seconds(&self) -> u64 {
        match self {
            Exceeded::Rate { retry_after } => retry_seconds(*retry_after),
            Exceeded::Concurrency { .. } => 1,
        }
    }
}

fn retry_seconds(wait: Duration) -> u64 {
    wait.as_secs_f64().ceil().max(1.0) as u64
}

/// How often a task waiting for a slot looks again while the replicas share the slots.
const SHARED_RETRY: Duration = Duration::from_millis(250);

/// Principals whose state is kept; past this, idle ones are forgotten (they start afresh).
const MAX_TRACKED: usize = 10_000;

/// Every principal's quota and what it has used.
#[derive(Default)]
pub struct Quotas {
    configured: RwLock<Configured>,
    used: Mutex<HashMap<String, Arc<Usage>>>,
    /// Where the replicas decide together, when they do.
    shared: std::sync::OnceLock<Arc<SharedQuotas>>,
}

#[derive(Default)]
struct Configured {
    default: Quota,
    by_principal: HashMap<String, Quota>,
}

#[derive(Default)]
struct Usage {
    bucket: Mutex<Option<Bucket>>,
    /// Calls of this principal running now.
    running: Mutex<u32>,
    /// Woken when one of them ends.
    ended: Notify,
}

struct Bucket {
    tokens: f64,
    at: Instant,
}

/// One running call of a principal, counted until dropped (and leased from the replicas'
/// shared count while they share one).
pub struct Slot {
    usage: Arc<Usage>,
    _lease: Option<Lease>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        *self.usage.running.lock().expect("slots lock") -= 1;
        self.usage.ended.notify_waiters();
    }
}

/// A slot taken for a request before it reached the handler that runs its guest, which takes
/// it over (cloning shares the one slot: request extensions must be cloneable).
#[derive(Clone)]
pub struct HandedSlot(Arc<Mutex<Option<Slot>>>);

impl HandedSlot {
    pub fn new(slot: Slot) -> Self {
        Self(Arc::new(Mutex::new(Some(slot))))
    }

    /// The slot, to whoever asks first.
    pub fn take(&self) -> Option<Slot> {
        self.0.lock().expect("handed slot lock").take()
    }
}

impl Quotas {
    /// `default` for every principal but those `by_principal` names.
    pub fn new(default: Quota, by_principal: HashMap<String, Quota>) -> Self {
        let quotas = Self::default();
        quotas.configure(default, by_principal);
        quotas
    }

    /// Measures every request from now on against these quotas. What principals have used is
    /// kept: the requests of the last minute and the calls running count towards the new ones.
    pub fn configure(&self, default: Quota, by_principal: HashMap<String, Quota>) {
        *self.configured.write().expect("quotas lock") = Configured {
            default,
            by_principal,
        };
    }

    fn quota(&self, principal: &str) -> Quota {
        let configured = self.configured.read().expect("quotas lock");
        configured
            .by_principal
            .get(principal)
            .copied()
            .unwrap_or(configured.default)
    }

    fn usage(&self, principal: &str) -> Arc<Usage> {
        let mut used = self.used.lock().expect("quota lock");
        if let Some(usage) = used.get(principal) {
            return usage.clone();
        }
        if used.len() >= MAX_TRACKED {
            // Only those with nothing running and a full bucket: forgetting them changes nothing.
            let now = Instant::now();
            used.retain(|_, usage| Arc::strong_count(usage) > 1 || !usage.is_idle(now));
        }
        let usage = Arc::new(Usage::default());
        used.insert(principal.to_string(), usage.clone());
        usage
    }

    /// Decides every quota from now on with the other replicas, through Redis.
    pub fn share(&self, shared: Arc<SharedQuotas>) {
        let _ = self.shared.set(shared);
    }

    /// Counts one request of `principal`, or says when the next one fits.
    pub async fn request(&self, principal: &str) -> Result<(), Exceeded> {
        let Some(per_minute) = self.quota(principal).requests_per_minute else {
            return Ok(());
        };
        if let Some(shared) = self.shared.get()
            && let Some(decided) = shared.request(principal, per_minute).await
        {
            return decided.map_err(|retry_after| Exceeded::Rate { retry_after });
        }
        self.request_here(principal, per_minute)
    }

    /// [`Quotas::request`] as this process alone counts it.
    fn request_here(&self, principal: &str, per_minute: u32) -> Result<(), Exceeded> {
        let usage = self.usage(principal);
        let capacity = f64::from(per_minute);
        let per_second = capacity / 60.0;
        let mut bucket = usage.bucket.lock().expect("bucket lock");
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
            return Ok(());
        }
        Err(Exceeded::Rate {
            retry_after: Duration::from_secs_f64((1.0 - bucket.tokens) / per_second),
        })
    }

    /// A slot for one call of `principal`, held until it is dropped, or the refusal when as
    /// many calls as its quota allows are running.
    pub async fn call(&self, principal: &str) -> Result<Slot, Exceeded> {
        let limit = self.quota(principal).concurrent_calls;
        let usage = self.usage(principal);
        {
            let mut running = usage.running.lock().expect("slots lock");
            if let Some(limit) = limit
                && *running >= limit
            {
                return Err(Exceeded::Concurrency { limit });
            }
            *running += 1;
        }
        // Counted here first: a refusal below gives the count back as the slot drops.
        let mut slot = Slot {
            usage,
            _lease: None,
        };
        if let (Some(limit), Some(shared)) = (limit, self.shared.get()) {
            match shared.lease(principal, limit).await {
                Some(Ok(lease)) => slot._lease = Some(lease),
                Some(Err(())) => return Err(Exceeded::Concurrency { limit }),
                None => {}
            }
        }
        Ok(slot)
    }

    /// A slot for one call of `principal`, waiting for one of its calls to end while as many
    /// as its quota allows are running: for work the caller does not wait on (a task).
    pub async fn wait_for_call(&self, principal: &str) -> Slot {
        let usage = self.usage(principal);
        loop {
            // Listening before looking: a call that ends in between still wakes this one.
            let ended = usage.ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            if let Ok(slot) = self.call(principal).await {
                return slot;
            }
            if self.shared.get().is_some() {
                // A call ending on another replica wakes nobody here: look again soon.
                let _ = tokio::time::timeout(SHARED_RETRY, ended).await;
            } else {
                ended.await;
            }
        }
    }
}

impl Usage {
    fn is_idle(&self, now: Instant) -> bool {
        // A bucket a minute old has refilled, whatever its size.
        let full = self
            .bucket
            .lock()
            .expect("bucket lock")
            .as_ref()
            .is_none_or(|bucket| now.duration_since(bucket.at) >= Duration::from_secs(60));
        full && *self.running.lock().expect("slots lock") == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit_calls(n: u32) -> Quotas {
        Quotas::new(
            Quota {
                requests_per_minute: None,
                concurrent_calls: Some(n),
            },
            HashMap::new(),
        )
    }

    #[tokio::test]
    async fn each_principal_has_its_own_bucket() {
        let quotas = Quotas::new(
            Quota {
                requests_per_minute: Some(3),
                concurrent_calls: None,
            },
            HashMap::from([(
                "key:ci".to_string(),
                Quota {
                    requests_per_minute: Some(1),
                    concurrent_calls: None,
                },
            )]),
        );
        for _ in 0..3 {
            assert_eq!(quotas.request("alice").await, Ok(()));
        }
        let Err(Exceeded::Rate { retry_after }) = quotas.request("alice").await else {
            panic!("the fourth request within a minute must be refused");
        };
        assert!(retry_after > Duration::from_secs(15) && retry_after <= Duration::from_secs(20));
        assert_eq!(quotas.request("bob").await, Ok(()));
        assert_eq!(quotas.request("key:ci").await, Ok(()));
        assert!(quotas.request("key:ci").await.is_err());
    }

    #[tokio::test]
    async fn concurrent_calls_are_released_with_their_slot() {
        let quotas = limit_calls(2);
        let first = quotas.call("alice").await.unwrap();
        let _second = quotas.call("alice").await.unwrap();
        assert!(matches!(
            quotas.call("alice").await,
            Err(Exceeded::Concurrency { limit: 2 })
        ));
        assert!(quotas.call("bob").await.is_ok());
        drop(first);
        assert!(quotas.call("alice").await.is_ok());
    }

    #[tokio::test]
    async fn new_quotas_apply_to_the_next_request_and_count_what_runs() {
        let quotas = limit_calls(3);
        let _running = [
            quotas.call("alice").await.unwrap(),
            quotas.call("alice").await.unwrap(),
        ];
        quotas.configure(
            Quota {
                requests_per_minute: Some(1),
                concurrent_calls: Some(2),
            },
            HashMap::new(),
        );
        // The two running calls fill the new limit of two.
        assert!(matches!(
            quotas.call("alice").await,
            Err(Exceeded::Concurrency { limit: 2 })
        ));
        assert_eq!(quotas.request("alice").await, Ok(()));
        assert!(quotas.request("alice").await.is_err());
        quotas.configure(Quota::default(), HashMap::new());
        assert!(quotas.call("alice").await.is_ok());
        assert_eq!(quotas.request("alice").await, Ok(()));
    }

    #[tokio::test]
    async fn a_waiting_call_starts_when_another_ends() {
        let quotas = Arc::new(limit_calls(1));
        let first = quotas.call("alice").await.unwrap();
        let waiting = tokio::spawn({
            let quotas = quotas.clone();
            async move { quotas.wait_for_call("alice").await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "no slot is free yet");
        drop(first);
        let second = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("the waiting call gets the freed slot")
            .unwrap();
        assert!(
            quotas.call("alice").await.is_err(),
            "{:p} holds it",
            &second
        );
    }
}
