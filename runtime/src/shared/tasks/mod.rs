//! Where task records are kept: [`Memory`] (this process; gone with it) or, under `[cluster]`,
//! Redis (`cluster::tasks`), where any replica answers for any task. Chosen once when moat
//! starts ([`super::Backends`]); the tasks (`mcp::tasks`) do not know which they have.
//!
//! Every backend keeps the same promises, which one set of tests proves on each (a real
//! `redis-server` for Redis): a task is kept only while its principal, and everyone, are under
//! their bounds; a record carries a version that every change bumps, and a change made from a
//! stale read is refused (two replicas changing one task never lose each other's change); a
//! record is gone once its time is up, and frees its place under the bounds.
//!
//! There is no fallback to this process's memory while Redis is down: a task kept on one replica
//! alone would be unknown to the one its client polls next. New tasks are refused instead.

use std::time::Duration;

use async_trait::async_trait;

pub use self::memory::Memory;
use super::StoreError;

mod memory;
#[cfg(test)]
pub(crate) mod promises;

/// How many tasks may be kept at once: per principal, and in all.
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    pub per_principal: usize,
    pub in_all: usize,
}

/// A task's record as last written, and the version to change it from.
#[derive(Clone, Debug, PartialEq)]
pub struct Stored {
    pub record: String,
    pub version: u64,
}

/// Task records, as text, wherever they are kept.
#[async_trait]
pub trait TaskRecords: Send + Sync {
    /// Keeps task `id` of `principal` for `ttl` at version 1, unless `bounds` are reached:
    /// `false` then.
    async fn create(
        &self,
        id: &str,
        principal: &str,
        record: &str,
        ttl: Duration,
        bounds: Bounds,
    ) -> Result<bool, StoreError>;

    /// Task `id`'s record, while it is kept. One that does not read back (written by another
    /// key or another moat, or changed where it is kept) is no task: `None`.
    async fn load(&self, id: &str) -> Result<Option<Stored>, StoreError>;

    /// Replaces task `id`'s record read at `version`: `false` if it changed (or ended) meanwhile.
    async fn replace(&self, id: &str, version: u64, record: &str) -> Result<bool, StoreError>;
}
