//! How much each principal may ask of moat: requests per minute (a token bucket that holds a
//! minute's worth) and calls at once. Each principal has its own, so one noisy agent exhausts
//! only its own quota.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

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

/// Principals whose state is kept; past this, idle ones are forgotten (they start afresh).
const MAX_TRACKED: usize = 10_000;

/// Every principal's quota and what it has used.
#[derive(Default)]
pub struct Quotas {
    default: Quota,
    by_principal: HashMap<String, Quota>,
    used: Mutex<HashMap<String, Arc<Usage>>>,
}

struct Usage {
    quota: Quota,
    bucket: Mutex<Bucket>,
    calls: Option<Arc<Semaphore>>,
}

struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Quotas {
    /// `default` for every principal but those `by_principal` names.
    pub fn new(default: Quota, by_principal: HashMap<String, Quota>) -> Self {
        Self {
            default,
            by_principal,
            used: Mutex::default(),
        }
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
        let quota = self
            .by_principal
            .get(principal)
            .copied()
            .unwrap_or(self.default);
        let usage = Arc::new(Usage {
            quota,
            bucket: Mutex::new(Bucket {
                tokens: quota.requests_per_minute.map_or(0.0, f64::from),
                at: Instant::now(),
            }),
            calls: quota
                .concurrent_calls
                .map(|n| Arc::new(Semaphore::new(n as usize))),
        });
        used.insert(principal.to_string(), usage.clone());
        usage
    }

    /// Counts one request of `principal`, or says when the next one fits.
    pub fn request(&self, principal: &str) -> Result<(), Exceeded> {
        let usage = self.usage(principal);
        let Some(per_minute) = usage.quota.requests_per_minute else {
            return Ok(());
        };
        let per_second = f64::from(per_minute) / 60.0;
        let mut bucket = usage.bucket.lock().expect("bucket lock");
        let now = Instant::now();
        let refilled = bucket.tokens + now.duration_since(bucket.at).as_secs_f64() * per_second;
        bucket.tokens = refilled.min(f64::from(per_minute));
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            return Ok(());
        }
        let wait = if per_second > 0.0 {
            (1.0 - bucket.tokens) / per_second
        } else {
            60.0
        };
        Err(Exceeded::Rate {
            retry_after: Duration::from_secs_f64(wait),
        })
    }

    /// A slot for one call of `principal`, held until the permit is dropped; `None` inside
    /// when calls are not limited.
    pub fn call(&self, principal: &str) -> Result<Option<OwnedSemaphorePermit>, Exceeded> {
        let usage = self.usage(principal);
        let Some(calls) = &usage.calls else {
            return Ok(None);
        };
        calls
            .clone()
            .try_acquire_owned()
            .map(Some)
            .map_err(|_| Exceeded::Concurrency {
                limit: usage.quota.concurrent_calls.unwrap_or(0),
            })
    }
}

impl Usage {
    fn is_idle(&self, now: Instant) -> bool {
        let full = match self.quota.requests_per_minute {
            None => true,
            Some(per_minute) => {
                let bucket = self.bucket.lock().expect("bucket lock");
                now.duration_since(bucket.at) >= Duration::from_secs(60)
                    || bucket.tokens >= f64::from(per_minute)
            }
        };
        let calls_free = match (&self.calls, self.quota.concurrent_calls) {
            (Some(calls), Some(n)) => calls.available_permits() == n as usize,
            _ => true,
        };
        full && calls_free
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_principal_has_its_own_bucket() {
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
            assert_eq!(quotas.request("alice"), Ok(()));
        }
        let Err(Exceeded::Rate { retry_after }) = quotas.request("alice") else {
            panic!("the fourth request within a minute must be refused");
        };
        assert!(retry_after > Duration::from_secs(15) && retry_after <= Duration::from_secs(20));
        assert_eq!(quotas.request("bob"), Ok(()));
        assert_eq!(quotas.request("key:ci"), Ok(()));
        assert!(quotas.request("key:ci").is_err());
    }

    #[test]
    fn concurrent_calls_are_released_with_their_permit() {
        let quotas = Quotas::new(
            Quota {
                requests_per_minute: None,
                concurrent_calls: Some(2),
            },
            HashMap::new(),
        );
        let first = quotas.call("alice").unwrap();
        let _second = quotas.call("alice").unwrap();
        assert_eq!(
            quotas.call("alice").unwrap_err(),
            Exceeded::Concurrency { limit: 2 }
        );
        assert!(quotas.call("bob").unwrap().is_some());
        drop(first);
        assert!(quotas.call("alice").is_ok());
    }
}
