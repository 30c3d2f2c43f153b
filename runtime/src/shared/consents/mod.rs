//! Where callers' consent is kept: their tokens, one refresh at a time, and the steps of flows
//! under way. One interface, [`Keeping`], with its backends apart: [`Memory`] (one process,
//! nothing kept across a restart), [`File`] (the sealed `credential_store` file, [`store`]) and,
//! under `[cluster]`, Redis (`cluster::consents`), which [`Fallback`] pairs with a copy in memory
//! that serves while Redis cannot be reached. The backend is chosen once, when moat starts
//! ([`Keepings`], among the [`super::Backends`]), for each `credential_store` setting a reload
//! brings; nothing that uses it knows which it has.
//!
//! Every backend keeps the same promises, which one set of tests proves on each (a real
//! `redis-server` for Redis): a write changes only its own entry; a turn is held by one owner at
//! a time, ends by itself when its time is up, and is ended only by its owner; a step is taken
//! once and not after its time.

use std::time::Duration;

use async_trait::async_trait;

pub use self::file::File;
pub use self::memory::Memory;

mod file;
mod memory;
pub mod store;

pub use self::store::{Entry, Seal, Settings, Store};
#[cfg(test)]
pub(crate) mod promises;

/// Seconds since the Unix epoch, as entries say when they are due.
fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Why a keeping could not answer, by what failed.
#[derive(Debug, Clone, PartialEq)]
pub enum KeepError {
    /// The store could not be asked (Redis down, a file that cannot be read or written).
    Unreachable(String),
    /// What it holds does not read back (another key, a changed byte, another format).
    Unreadable(String),
    /// A value could not be sealed or encoded before it was written.
    Sealing(String),
}

impl std::fmt::Display for KeepError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Unreachable(why) => write!(f, "the credential store cannot be reached: {why}"),
            Self::Unreadable(why) => {
                write!(f, "the credential store's record is unreadable: {why}")
            }
            Self::Sealing(why) => write!(f, "a credential could not be sealed: {why}"),
        }
    }
}

impl std::error::Error for KeepError {}

/// Callers' tokens, refresh turns and consent steps, wherever they are kept.
#[async_trait]
pub trait Keeping: Send + Sync {
    /// What `principal` has from `source`.
    async fn tokens(&self, source: &str, principal: &str) -> Result<Option<Entry>, KeepError>;

    /// Keeps `entry` in place of what its principal had from its source; no other entry changes.
    async fn keep(&self, entry: &Entry) -> Result<(), KeepError>;

    /// Drops what `principal` has from `source`: whether there was anything.
    async fn forget(&self, source: &str, principal: &str) -> Result<bool, KeepError>;

    /// Every principal's tokens (for `moat credentials`).
    async fn all(&self) -> Result<Vec<Entry>, KeepError>;

    /// Whether `owner` now holds the turn to refresh `principal`'s tokens from `source`: no one
    /// else held it. It ends after `lasts` whatever happens to its owner.
    async fn take_turn(
        &self,
        source: &str,
        principal: &str,
        owner: &str,
        lasts: Duration,
    ) -> Result<bool, KeepError>;

    /// Ends `owner`'s turn; a turn someone else took since (after `owner`'s ran out) stays.
    async fn end_turn(&self, source: &str, principal: &str, owner: &str) -> Result<(), KeepError>;

    /// Keeps a consent step under `key` for `lasts`.
    async fn put_step(&self, key: &str, step: &[u8], lasts: Duration) -> Result<(), KeepError>;

    /// The step under `key`, taken: no one finds it again.
    async fn take_step(&self, key: &str) -> Result<Option<Vec<u8>>, KeepError>;

    /// The step under `key`, left in place.
    async fn peek_step(&self, key: &str) -> Result<Option<Vec<u8>>, KeepError>;
}

/// Makes the keeping a `credential_store` setting asks for: a reload may bring another.
pub trait Keepings: Send + Sync {
    fn keeping(&self, store: Option<&Settings>) -> anyhow::Result<Box<dyn Keeping>>;
}

/// This process's keeping: the sealed file a `credential_store` names, otherwise memory.
pub struct Local;

impl Keepings for Local {
    fn keeping(&self, store: Option<&Settings>) -> anyhow::Result<Box<dyn Keeping>> {
        Ok(match store {
            Some(Settings {
                path: Some(path),
                key,
            }) => Box::new(File::open(Store::new(path, key)?)?),
            _ => Box::new(Memory::default()),
        })
    }
}

/// A shared keeping (Redis) with a copy in this process that serves while it cannot be reached:
/// the rule "shared store down → this replica's own" held once, here.
pub struct Fallback {
    shared: Box<dyn Keeping>,
    local: Memory,
}

impl Fallback {
    pub fn new(shared: Box<dyn Keeping>) -> Self {
        Self {
            shared,
            local: Memory::default(),
        }
    }

    /// `result`, or what `local` says when the shared store could not be reached.
    async fn or_local<T>(
        result: Result<T, KeepError>,
        what: &str,
        local: impl Future<Output = Result<T, KeepError>>,
    ) -> Result<T, KeepError> {
        match result {
            Err(KeepError::Unreachable(why)) => {
                tracing::warn!("{why}: {what} on this replica only");
                local.await
            }
            other => other,
        }
    }
}

#[async_trait]
impl Keeping for Fallback {
    async fn tokens(&self, source: &str, principal: &str) -> Result<Option<Entry>, KeepError> {
        match self.shared.tokens(source, principal).await {
            // What the others see is what this replica holds from now on.
            Ok(Some(entry)) => {
                self.local.keep(&entry).await?;
                Ok(Some(entry))
            }
            Ok(None) => {
                self.local.forget(source, principal).await?;
                Ok(None)
            }
            Err(KeepError::Unreachable(_)) => self.local.tokens(source, principal).await,
            Err(error) => Err(error),
        }
    }

    async fn keep(&self, entry: &Entry) -> Result<(), KeepError> {
        self.local.keep(entry).await?;
        let shared = self.shared.keep(entry).await;
        Self::or_local(shared, "a caller's tokens serve", async { Ok(()) }).await
    }

    async fn forget(&self, source: &str, principal: &str) -> Result<bool, KeepError> {
        let here = self.local.forget(source, principal).await?;
        let shared = self.shared.forget(source, principal).await;
        Self::or_local(shared, "a caller's tokens are dropped", async { Ok(here) }).await
    }

    async fn all(&self) -> Result<Vec<Entry>, KeepError> {
        let shared = self.shared.all().await;
        Self::or_local(shared, "the tokens are listed", self.local.all()).await
    }

    async fn take_turn(
        &self,
        source: &str,
        principal: &str,
        owner: &str,
        lasts: Duration,
    ) -> Result<bool, KeepError> {
        let shared = self.shared.take_turn(source, principal, owner, lasts).await;
        Self::or_local(
            shared,
            "a refresh takes its turn",
            self.local.take_turn(source, principal, owner, lasts),
        )
        .await
    }

    async fn end_turn(&self, source: &str, principal: &str, owner: &str) -> Result<(), KeepError> {
        self.local.end_turn(source, principal, owner).await?;
        let shared = self.shared.end_turn(source, principal, owner).await;
        // Unended, the shared turn runs out by itself.
        Self::or_local(shared, "a refresh turn ends", async { Ok(()) }).await
    }

    async fn put_step(&self, key: &str, step: &[u8], lasts: Duration) -> Result<(), KeepError> {
        let shared = self.shared.put_step(key, step, lasts).await;
        Self::or_local(
            shared,
            "a consent step is kept, and goes on only if the browser comes back here,",
            self.local.put_step(key, step, lasts),
        )
        .await
    }

    async fn take_step(&self, key: &str) -> Result<Option<Vec<u8>>, KeepError> {
        if let Some(step) = self.local.take_step(key).await? {
            return Ok(Some(step));
        }
        let shared = self.shared.take_step(key).await;
        Self::or_local(shared, "a consent step is looked for", async { Ok(None) }).await
    }

    async fn peek_step(&self, key: &str) -> Result<Option<Vec<u8>>, KeepError> {
        if let Some(step) = self.local.peek_step(key).await? {
            return Ok(Some(step));
        }
        let shared = self.shared.peek_step(key).await;
        Self::or_local(shared, "a consent step is looked for", async { Ok(None) }).await
    }
}
