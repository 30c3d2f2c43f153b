//! Events one replica raises for the others (a task to stop, a resource that changed), through
//! one Redis pub/sub channel. Each replica keeps one subscribing connection of its own, made
//! again whenever Redis has been unreachable, and hands what others publish to its listeners;
//! what it publishes itself it has already acted on, so it skips its own events.
//!
//! Pub/sub delivers to the replicas connected at that moment and keeps nothing: an event raised
//! while Redis is unreachable is lost, which every listener is written to bear.

use std::sync::Weak;

use futures_util::StreamExt as _;
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;

use super::{Cluster, PROBE_EVERY};

/// The channel every replica publishes to and listens on.
const CHANNEL: &str = "moat:events";

/// How many events a slow listener may fall behind before it misses some.
pub(super) const BACKLOG: usize = 1024;

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
}

/// One event on the wire, with the replica (instance) that raised it.
#[derive(Serialize, Deserialize)]
struct Envelope {
    from: String,
    #[serde(flatten)]
    event: Event,
}

impl Cluster {
    /// Tells the other replicas of `event` (if Redis is reachable; otherwise it is lost).
    pub async fn publish(&self, event: Event) {
        let envelope = Envelope {
            from: self.instance.clone(),
            event,
        };
        let Ok(payload) = serde_json::to_string(&envelope) else {
            return;
        };
        self.run(|mut connection| async move {
            redis::cmd("PUBLISH")
                .arg(CHANNEL)
                .arg(payload)
                .query_async::<i64>(&mut connection)
                .await
        })
        .await;
    }

    /// The events other replicas raise from now on.
    pub fn events(&self) -> broadcast::Receiver<Event> {
        self.events.subscribe()
    }
}

/// The next event others raise; `None` once moat is stopping. A listener that fell behind
/// misses the oldest (said once in the log) and goes on.
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

/// Listens on the channel while the cluster lives, subscribing again each time Redis comes back.
pub(super) async fn listen(cluster: Weak<Cluster>, client: redis::Client) {
    loop {
        let Some(reconnect) = cluster.upgrade().map(|c| c.reconnect.clone()) else {
            return;
        };
        let lost = reconnect.notified();
        match subscribe(&client).await {
            Ok(pubsub) => {
                let mut messages = pubsub.into_on_message();
                tokio::pin!(lost);
                loop {
                    let message = tokio::select! {
                        message = messages.next() => message,
                        // Redis went away: a connection that never saw it go may hang.
                        () = &mut lost => None,
                    };
                    let Some(message) = message else { break };
                    let Some(cluster) = cluster.upgrade() else {
                        return;
                    };
                    cluster.received(message.get_payload_bytes());
                }
            }
            Err(error) => tracing::debug!("subscribing to {CHANNEL} failed: {error}"),
        }
        tokio::time::sleep(PROBE_EVERY).await;
    }
}

async fn subscribe(client: &redis::Client) -> redis::RedisResult<redis::aio::PubSub> {
    let mut pubsub = tokio::time::timeout(super::RESPONSE_TIMEOUT, client.get_async_pubsub())
        .await
        .map_err(|_| {
            redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut))
        })??;
    pubsub.subscribe(CHANNEL).await?;
    Ok(pubsub)
}

impl Cluster {
    fn received(&self, payload: &[u8]) {
        match serde_json::from_slice::<Envelope>(payload) {
            Ok(envelope) if envelope.from == self.instance => {}
            Ok(envelope) => {
                // No listener is no error: nothing here cares about that event now.
                let _ = self.events.send(envelope.event);
            }
            Err(error) => tracing::warn!("an event on {CHANNEL} that moat does not know: {error}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_on_the_wire_names_what_happened_and_where() {
        let envelope = Envelope {
            from: "moat-1/00ff".into(),
            event: Event::StopRun { run: "r1".into() },
        };
        let text = serde_json::to_string(&envelope).unwrap();
        assert_eq!(
            text,
            r#"{"from":"moat-1/00ff","event":"stop_run","run":"r1"}"#
        );
        let back: Envelope = serde_json::from_str(&text).unwrap();
        assert_eq!(back.event, Event::StopRun { run: "r1".into() });
    }
}
