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
//! Where they are counted is the [`QuotaStore`] moat started with: this process, or under
//! `[cluster]` Redis for every replica at once (each replica deciding alone while Redis cannot
//! be reached).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::sync::watch;

use crate::shared::quotas::{Held, Memory, QuotaStore};

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

/// Every principal's quota and what it has used.
pub struct Quotas {
    configured: RwLock<Configured>,
    /// Where what principals use is counted.
    store: Arc<dyn QuotaStore>,
    /// The slots held here now, whoever holds them: the guests running, for a drain to await.
    running: Arc<watch::Sender<usize>>,
}

impl Default for Quotas {
    fn default() -> Self {
        Self::counted_in(Arc::new(Memory::default()))
    }
}

#[derive(Default)]
struct Configured {
    default: Quota,
    by_principal: HashMap<String, Quota>,
}

/// One running call of a principal, counted until dropped.
pub struct Slot {
    _held: Held,
    running: Arc<watch::Sender<usize>>,
}

impl Slot {
    fn new(held: Held, running: &Arc<watch::Sender<usize>>) -> Self {
        running.send_modify(|n| *n += 1);
        Self {
            _held: held,
            running: running.clone(),
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.running.send_modify(|n| *n -= 1);
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
    /// No quota yet, what is used counted in `store`.
    pub fn counted_in(store: Arc<dyn QuotaStore>) -> Self {
        Self {
            configured: RwLock::default(),
            store,
            running: Arc::new(watch::Sender::new(0)),
        }
    }

    /// `default` for every principal but those `by_principal` names, counted in this process.
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

    /// The quota `principal` is measured against now.
    pub fn quota(&self, principal: &str) -> Quota {
        let configured = self.configured.read().expect("quotas lock");
        configured
            .by_principal
            .get(principal)
            .copied()
            .unwrap_or(configured.default)
    }

    /// Counts one request of `principal`, or says when the next one fits.
    pub async fn request(&self, principal: &str) -> Result<(), Exceeded> {
        let Some(per_minute) = self.quota(principal).requests_per_minute else {
            return Ok(());
        };
        match self.store.take_token(principal, per_minute).await {
            Ok(decided) => decided.map_err(|retry_after| Exceeded::Rate { retry_after }),
            Err(error) => {
                // No count can be made: the request is served rather than refused for it.
                tracing::warn!("{principal}'s request rate goes uncounted: {error}");
                Ok(())
            }
        }
    }

    /// A slot for one call of `principal`, held until it is dropped, or the refusal when as
    /// many calls as its quota allows are running.
    pub async fn call(&self, principal: &str) -> Result<Slot, Exceeded> {
        let limit = self.quota(principal).concurrent_calls;
        match self.store.take_slot(principal, limit).await {
            Ok(Some(held)) => Ok(Slot::new(held, &self.running)),
            Ok(None) => Err(Exceeded::Concurrency {
                limit: limit.unwrap_or_default(),
            }),
            Err(error) => {
                tracing::warn!("{principal}'s call goes uncounted: {error}");
                Ok(Slot::new(Box::new(()), &self.running))
            }
        }
    }

    /// How many calls (of any principal, tasks' runs among them) hold a slot here now.
    pub fn running(&self) -> usize {
        *self.running.borrow()
    }

    /// Resolves once no call holds a slot here.
    pub async fn none_running(&self) {
        let mut running = self.running.subscribe();
        let _ = running.wait_for(|n| *n == 0).await;
    }

    /// A slot for one call of `principal`, waiting for one of its calls to end while as many
    /// as its quota allows are running: for work the caller does not wait on (a task).
    pub async fn wait_for_call(&self, principal: &str) -> Slot {
        loop {
            // Listening before looking: a call that ends in between still wakes this one.
            let freed = self.store.freed(principal);
            if let Ok(slot) = self.call(principal).await {
                return slot;
            }
            freed.await;
        }
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

    #[tokio::test]
    async fn every_slot_held_counts_as_running_until_it_is_dropped() {
        let quotas = Arc::new(Quotas::default());
        let (first, second) = (
            quotas.call("alice").await.unwrap(),
            quotas.call("bob").await,
        );
        assert_eq!(quotas.running(), 2);
        let idle = tokio::spawn({
            let quotas = quotas.clone();
            async move { quotas.none_running().await }
        });
        drop(first);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!idle.is_finished(), "bob's call still runs");
        drop(second);
        tokio::time::timeout(Duration::from_secs(5), idle)
            .await
            .expect("no call runs")
            .unwrap();
        assert_eq!(quotas.running(), 0);
    }
}
