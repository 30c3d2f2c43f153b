//! The other replicas serving with this one, if any: which run this is, whether another run is
//! alive, and the events one raises for the others ([`Event`]). [`Alone`] is a moat with no
//! other replica (nothing to tell, no one else to ask about); under `[cluster]` Redis answers
//! (`cluster::events`).
//!
//! Events are told, not kept: one raised while the others cannot be reached is lost, which every
//! listener is written to bear. A replica never hears its own events: it acted on them already.

use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;

/// How many events a slow listener may fall behind before it misses some.
pub const BACKLOG: usize = 1024;

/// Something that happened on one replica which others act on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// Stop the run `run` of a task, wherever it runs: its task was cancelled.
    StopRun { run: String },
    /// The resource at `uri` changed.
    ResourceUpdated { uri: String },
    /// A replica's tool list changed (a reload): the others' listeners list again, through
    /// whichever replica serves them next.
    ToolsChanged,
    /// A caller's consented tokens arrived: calls waiting for consent look again.
    ConsentArrived,
    /// A call started or ended on a replica: the consoles of the others show it too.
    Call { call: CallEvent },
    /// An operator asks the replica `replica` to stop its call `id`.
    CancelCall { replica: String, id: u64 },
}

/// A call's start or end, as the operators' consoles are told of it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CallEvent {
    /// The replica run that serves it ([`Replicas::instance`]).
    pub replica: String,
    /// Its number on that replica.
    pub id: u64,
    pub principal: String,
    pub tool: String,
    /// When it started, in milliseconds since the Unix epoch.
    pub started_ms: u64,
    /// How it ended; none while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended: Option<CallEnd>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CallEnd {
    pub duration_ms: f64,
    /// As the audit log names it (`ok`, `denied`, `cancelled`…).
    pub outcome: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl CallEnd {
    /// Whether the call failed or was refused (a question to the client or a task is neither).
    pub fn failed(&self) -> bool {
        !matches!(self.outcome.as_str(), "ok" | "input_required" | "task")
    }
}

/// This replica among the others.
#[async_trait]
pub trait Replicas: Send + Sync {
    /// This run of this replica, as the others know it.
    fn instance(&self) -> &str;

    /// Whether the replica run `instance` is alive; when no one can say, it is taken to be.
    async fn alive(&self, instance: &str) -> bool;

    /// Tells the other replicas of `event`.
    async fn publish(&self, event: Event);

    /// Tells the other replicas of `event` without waiting for it to be sent.
    fn tell(self: Arc<Self>, event: Event);

    /// The events the other replicas raise from now on.
    fn events(&self) -> broadcast::Receiver<Event>;
}

/// A moat with no other replica.
pub struct Alone {
    /// Never sends: kept so that listeners wait rather than end.
    quiet: broadcast::Sender<Event>,
}

impl Default for Alone {
    fn default() -> Self {
        Self {
            quiet: broadcast::Sender::new(1),
        }
    }
}

#[async_trait]
impl Replicas for Alone {
    fn instance(&self) -> &str {
        "local"
    }

    async fn alive(&self, _: &str) -> bool {
        // Every run it knows of is its own, alive as it asks.
        true
    }

    async fn publish(&self, _: Event) {}

    fn tell(self: Arc<Self>, _: Event) {}

    fn events(&self) -> broadcast::Receiver<Event> {
        self.quiet.subscribe()
    }
}

/// The next event others raise; `None` once they can raise none (moat is stopping). A listener
/// that fell behind misses the oldest (said once in the log) and goes on.
pub async fn next(events: &mut broadcast::Receiver<Event>) -> Option<Event> {
    loop {
        match events.recv().await {
            Ok(event) => return Some(event),
            Err(broadcast::error::RecvError::Lagged(missed)) => {
                tracing::warn!("{missed} events from other replicas came too fast to act on");
            }
            Err(broadcast::error::RecvError::Closed) => return None,
        }
    }
}
