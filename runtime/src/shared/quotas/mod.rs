//! Where each principal's quota is counted: its request rate (a token bucket that holds a
//! minute's worth and refills continuously) and its calls running at once (slots, each held
//! until dropped). [`Memory`] counts in this process; under `[cluster]` Redis counts for every
//! replica at once (`cluster::quotas`), which [`Fallback`] pairs with this replica's own count,
//! deciding alone while Redis cannot be reached. Chosen once when moat starts
//! ([`super::Backends`]); the quotas (`access::quotas`) do not know which they have.
//!
//! Every backend keeps the same promises, which one set of tests proves on each (a real
//! `redis-server` for Redis): a bucket of N lets N requests through at once and then says how
//! long until the next; principals never share a bucket or slots; a slot is given back when it
//! is dropped; N slots are held at most, however many are asked for at once.

use std::time::Duration;

use async_trait::async_trait;
use futures_util::future::BoxFuture;

pub use self::memory::Memory;
use super::StoreError;

mod memory;
#[cfg(test)]
pub(crate) mod promises;

/// A call slot, held until dropped.
pub type Held = Box<dyn Send + Sync>;

/// How often a call waiting for a slot looks again when slots are counted elsewhere too: a call
/// ending on another replica wakes nobody here.
pub const LOOK_AGAIN: Duration = Duration::from_millis(250);

/// Principals' request rates and call slots, wherever they are counted.
#[async_trait]
pub trait QuotaStore: Send + Sync {
    /// Counts one request of `principal` at `per_minute`: `Ok`, or how long until one more fits.
    async fn take_token(
        &self,
        principal: &str,
        per_minute: u32,
    ) -> Result<Result<(), Duration>, StoreError>;

    /// One of `principal`'s call slots, held until dropped; `None` when `limit` are held. Without
    /// a limit the slot is still counted, so that a limit set later counts what runs.
    async fn take_slot(
        &self,
        principal: &str,
        limit: Option<u32>,
    ) -> Result<Option<Held>, StoreError>;

    /// Resolves once one of `principal`'s slots may have been given back since this was called
    /// (or after a while: a caller looks again either way).
    fn freed(&self, principal: &str) -> BoxFuture<'static, ()>;
}

/// A shared count (Redis) with this replica's own beside it, which decides while the shared one
/// cannot be reached: the rule "shared store down → this replica's own" held once, here.
pub struct Fallback {
    shared: Box<dyn QuotaStore>,
    local: Memory,
}

impl Fallback {
    pub fn new(shared: Box<dyn QuotaStore>) -> Self {
        Self {
            shared,
            local: Memory::default(),
        }
    }
}

#[async_trait]
impl QuotaStore for Fallback {
    async fn take_token(
        &self,
        principal: &str,
        per_minute: u32,
    ) -> Result<Result<(), Duration>, StoreError> {
        match self.shared.take_token(principal, per_minute).await {
            Err(StoreError::Unreachable(_)) => self.local.take_token(principal, per_minute).await,
            decided => decided,
        }
    }

    async fn take_slot(
        &self,
        principal: &str,
        limit: Option<u32>,
    ) -> Result<Option<Held>, StoreError> {
        // Counted here first: this replica's own calls are among the shared count, so the local
        // count refuses only what the shared one would, and it holds while Redis is away.
        let Some(here) = self.local.take_slot(principal, limit).await? else {
            return Ok(None);
        };
        match self.shared.take_slot(principal, limit).await {
            Ok(Some(shared)) => Ok(Some(Box::new((here, shared)))),
            Ok(None) => Ok(None),
            Err(StoreError::Unreachable(_)) => Ok(Some(here)),
            Err(error) => Err(error),
        }
    }

    fn freed(&self, principal: &str) -> BoxFuture<'static, ()> {
        let here = self.local.freed(principal);
        Box::pin(async move {
            let _ = tokio::time::timeout(LOOK_AGAIN, here).await;
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A shared count that cannot be asked now (Redis down).
    struct Unreachable;

    #[async_trait]
    impl QuotaStore for Unreachable {
        async fn take_token(&self, _: &str, _: u32) -> Result<Result<(), Duration>, StoreError> {
            Err(StoreError::Unreachable("no answer".into()))
        }

        async fn take_slot(&self, _: &str, _: Option<u32>) -> Result<Option<Held>, StoreError> {
            Err(StoreError::Unreachable("no answer".into()))
        }

        fn freed(&self, _: &str) -> BoxFuture<'static, ()> {
            Box::pin(std::future::pending())
        }
    }

    #[tokio::test]
    async fn while_the_shared_count_cannot_be_reached_this_replica_keeps_every_promise() {
        promises::check(&Fallback::new(Box::new(Unreachable))).await;
    }

    /// A shared count where another replica holds every slot and has spent every token.
    struct Full;

    #[async_trait]
    impl QuotaStore for Full {
        async fn take_token(&self, _: &str, _: u32) -> Result<Result<(), Duration>, StoreError> {
            Ok(Err(Duration::from_secs(7)))
        }

        async fn take_slot(&self, _: &str, _: Option<u32>) -> Result<Option<Held>, StoreError> {
            Ok(None)
        }

        fn freed(&self, _: &str) -> BoxFuture<'static, ()> {
            Box::pin(std::future::pending())
        }
    }

    #[tokio::test]
    async fn the_shared_count_decides_while_it_answers() {
        let quotas = Fallback::new(Box::new(Full));
        let wait = quotas.take_token("ada", 100).await.unwrap();
        assert_eq!(
            wait,
            Err(Duration::from_secs(7)),
            "this replica's full bucket is not asked"
        );
        assert!(quotas.take_slot("ada", Some(5)).await.unwrap().is_none());
        // The refused shared slot gave this replica's back: the next local count starts at 0.
        let local: Vec<_> =
            futures_util::future::join_all((0..5).map(|_| quotas.local.take_slot("ada", Some(5))))
                .await;
        assert!(local.into_iter().all(|slot| slot.unwrap().is_some()));
    }
}
