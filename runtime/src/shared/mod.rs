//! State that more than one process may share, one interface per kind, with the backends that
//! keep it in this process or in a file beside it; the Redis backends live in `cluster`, which
//! is the only layer that speaks to Redis. The backends are chosen once, when moat starts
//! ([`Backends`]), and handed down: nothing that uses one knows which it has.
//!
//! - [`consents`]: callers' consented tokens, the turn to refresh them, and the steps of consent
//!   flows under way;
//! - [`quotas`]: each principal's request rate and call slots;
//! - [`tasks`]: task records, versioned;
//! - [`sessions`]: legacy sessions another replica may restore;
//! - [`replicas`]: this run among the others, and the events one raises for the others;
//! - [`seal`]: how a value kept where others can read it is sealed for the one key it is kept
//!   under.

pub mod consents;
pub mod quotas;
pub mod replicas;
pub mod seal;
pub mod sessions;
pub mod tasks;

use std::sync::Arc;

/// Why a shared store could not answer, by what failed.
#[derive(Debug, Clone, PartialEq)]
pub enum StoreError {
    /// It could not be asked now (Redis down or too slow); asking again later may work.
    Unreachable(String),
    /// A value could not be sealed or encoded before it was written.
    Sealing(String),
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Unreachable(why) => write!(f, "the shared store cannot be reached: {why}"),
            Self::Sealing(why) => write!(f, "a value could not be sealed: {why}"),
        }
    }
}

impl std::error::Error for StoreError {}

/// One backend of each kind of shared state, chosen together.
#[derive(Clone)]
pub struct Backends {
    pub replicas: Arc<dyn replicas::Replicas>,
    pub quotas: Arc<dyn quotas::QuotaStore>,
    pub tasks: Arc<dyn tasks::TaskRecords>,
    pub sessions: Arc<dyn sessions::SessionRecords>,
    pub consents: Arc<dyn consents::Keepings>,
}

impl Backends {
    /// Everything in this process (and consents in their file, when one is named): a moat with
    /// no other replica.
    pub fn alone() -> Self {
        Self {
            replicas: Arc::new(replicas::Alone::default()),
            quotas: Arc::new(quotas::Memory::default()),
            tasks: Arc::new(tasks::Memory::default()),
            sessions: Arc::new(sessions::Alone),
            consents: Arc::new(consents::Local),
        }
    }
}

impl Default for Backends {
    fn default() -> Self {
        Self::alone()
    }
}
