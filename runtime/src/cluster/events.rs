//! Events one replica raises for the others (a task to stop, a resource that changed), through
//! one Redis pub/sub channel. Each replica keeps one subscribing connection of its own, made
//! again whenever Redis has been unreachable, and hands what others publish to its listeners;
//! what it publishes itself it has already acted on, so it skips its own events.
//!
//! Pub/sub delivers to the replicas connected at that moment and keeps nothing: an event raised
//! while Redis is unreachable is lost, which every listener is written to bear.

use std::sync::Weak;

use async_trait::async_trait;
use futures_util::StreamExt as _;
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;

use super::{Cluster, PROBE_EVERY};
pub use crate::shared::replicas::Event;
use crate::shared::replicas::Replicas;

/// The channel every replica publishes to and listens on.
const CHANNEL: &str = "moat:events";

/// One event on the wire, with the replica (instance) that raised it.
#[derive(Serialize, Deserialize)]
struct Envelope {
    from: String,
    #[serde(flatten)]
    event: Event,
}

#[async_trait]
impl Replicas for Cluster {
    fn instance(&self) -> &str {
        &self.instance
    }

    async fn alive(&self, instance: &str) -> bool {
        // Redis that cannot say takes it for alive: a task is not failed for Redis's outage.
        self.is_alive(instance).await.unwrap_or(true)
    }

    /// Lost when Redis cannot be reached.
    async fn publish(&self, event: Event) {
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

    fn tell(self: std::sync::Arc<Self>, event: Event) {
        tokio::spawn(async move { self.publish(event).await });
    }

    fn events(&self) -> broadcast::Receiver<Event> {
        self.events.subscribe()
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
