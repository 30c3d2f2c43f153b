//! What the clients are told when what they see changes: a legacy session on its own
//! connection, a 2026-07-28 client on its `subscriptions/listen` stream; and what the other
//! replicas raise (resource updates, tool-list changes, consent that arrived), told here.

use std::collections::BTreeSet;
use std::sync::Arc;

use rmcp::ErrorData as McpError;
use rmcp::RoleServer;
use rmcp::service::{Peer, SubscriptionContext};

use super::{Catalogue, Inner, Subscribed};
use crate::access::Principal;
use crate::access::tool_sets::ToolSets;
use crate::plugin::Tool;
use crate::plugin::registry::Registry;
use crate::shared::replicas::Event;

impl Catalogue {
    /// Tells this legacy session of updates of the resources in `subscribed`, as long as it lasts.
    pub fn watch_resources(&self, peer: Peer<RoleServer>, subscribed: Subscribed) {
        let mut watchers = self.inner.watchers.lock().expect("watchers lock");
        watchers.retain(|(peer, _)| !peer.is_transport_closed());
        if !watchers.iter().any(|(_, s)| Arc::ptr_eq(s, &subscribed)) {
            watchers.push((peer, subscribed));
        }
    }

    /// Sends `notifications/resources/updated` for `uri` to every session and subscription
    /// stream subscribed to it, on every replica.
    pub async fn resource_updated(&self, uri: &str) {
        let event = Event::ResourceUpdated {
            uri: uri.to_string(),
        };
        self.inner.backends.replicas.publish(event).await;
        self.tell_resource_updated(uri).await;
    }

    /// Sends `notifications/resources/updated` for `uri` to the sessions and subscription
    /// streams here subscribed to it.
    async fn tell_resource_updated(&self, uri: &str) {
        let _ = self.inner.updates.send(uri.to_string());
        let peers: Vec<Peer<RoleServer>> = {
            let mut watchers = self.inner.watchers.lock().expect("watchers lock");
            watchers.retain(|(peer, _)| !peer.is_transport_closed());
            watchers
                .iter()
                .filter(|(_, s)| s.lock().expect("subscriptions lock").contains(uri))
                .map(|(peer, _)| peer.clone())
                .collect()
        };
        for peer in peers {
            let param = rmcp::model::ResourceUpdatedNotificationParam::new(uri.to_string());
            let _ = peer.notify_resource_updated(param).await;
        }
    }

    /// Tells this legacy session, which serves `principal`, of every later change of the
    /// tools `principal` sees.
    pub fn follow(&self, peer: Peer<RoleServer>, principal: Principal) {
        let mut sessions = self.inner.sessions.lock().expect("sessions lock");
        sessions.retain(|(peer, _)| !peer.is_transport_closed());
        sessions.push((peer, principal));
    }

    /// Serves one `subscriptions/listen` stream of `principal`: a tool-list change
    /// notification on each change of the tools `principal` sees, until the client ends the
    /// stream.
    pub async fn listen(
        &self,
        subscription: SubscriptionContext,
        principal: Principal,
    ) -> Result<(), McpError> {
        let mut changes = self.inner.current.subscribe();
        let mut updates = self.inner.updates.subscribe();
        let mut elsewhere = self.inner.tools_elsewhere.subscribe();
        let tools = subscription.accepted().tools_list_changed == Some(true);
        let resources: BTreeSet<String> = subscription
            .accepted()
            .resource_subscriptions
            .iter()
            .flatten()
            .cloned()
            .collect();
        let mut seen = fingerprint(&self.current(), &self.tool_sets(), &principal);
        loop {
            tokio::select! {
                () = subscription.cancelled() => return Ok(()),
                update = updates.recv(), if !resources.is_empty() => {
                    let uri = match update {
                        Ok(uri) => uri,
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                        Err(_) => return Ok(()),
                    };
                    // Only a resource the caller may read, as of now.
                    let visible = self.find_resource(&self.current(), &principal, &uri).is_some();
                    if resources.contains(&uri) && visible
                        && let Err(error) = subscription.sink().notify_resource_updated(uri).await
                    {
                        tracing::debug!("a resource subscription ended: {error}");
                        return Ok(());
                    }
                }
                Ok(()) = elsewhere.recv(), if tools => {
                    if let Err(error) = subscription.sink().notify_tool_list_changed().await {
                        tracing::debug!("a tool-list subscription ended: {error}");
                        return Ok(());
                    }
                }
                changed = changes.changed(), if tools => {
                    if changed.is_err() {
                        return Ok(()); // the server is shutting down
                    }
                    let now = fingerprint(&self.current(), &self.tool_sets(), &principal);
                    if now == seen {
                        continue; // others' tools changed, not this caller's
                    }
                    seen = now;
                    if let Err(error) = subscription.sink().notify_tool_list_changed().await {
                        tracing::debug!("a tool-list subscription ended: {error}");
                        return Ok(());
                    }
                }
            }
        }
    }

    /// Tells every legacy session and tool-list subscription stream here that another
    /// replica's tools changed.
    fn tell_tools_changed_elsewhere(&self) {
        let _ = self.inner.tools_elsewhere.send(());
        let mut sessions = self.inner.sessions.lock().expect("sessions lock");
        sessions.retain(|(peer, _)| !peer.is_transport_closed());
        for (peer, _) in sessions.iter() {
            tell_tools_changed(peer.clone());
        }
    }

    /// Sends its notification to each legacy session whose principal's tools differ between
    /// `before` and `after`; a client slow to read holds up no one else.
    pub(super) fn notify_sessions(
        &self,
        before: (&Registry, &ToolSets),
        after: (&Registry, &ToolSets),
    ) {
        let mut sessions = self.inner.sessions.lock().expect("sessions lock");
        sessions.retain(|(peer, _)| !peer.is_transport_closed());
        for (peer, principal) in sessions.iter() {
            if same_tools(before, after, principal) {
                continue;
            }
            tell_tools_changed(peer.clone());
        }
    }
}

impl Catalogue {
    /// Tells every legacy session its tool list may have changed.
    pub(super) fn tell_everyone_tools_changed(&self) {
        let mut sessions = self.inner.sessions.lock().expect("sessions lock");
        sessions.retain(|(peer, _)| !peer.is_transport_closed());
        for (peer, _) in sessions.iter() {
            tell_tools_changed(peer.clone());
        }
    }
}

/// Sends a legacy session its tool-list notification, without waiting: a client slow to read
/// holds up no one else.
fn tell_tools_changed(peer: Peer<RoleServer>) {
    tokio::spawn(async move {
        if let Err(error) = peer.notify_tool_list_changed().await {
            tracing::debug!("a session did not take the tool-list change: {error}");
        }
    });
}

/// Acts on what the other replicas raise (resource updates, tool-list changes, consent that
/// arrived), while the catalogue lives. Another replica's tool-list change reaches every listener
/// here, whatever it may see: which tools changed for whom is that replica's to know, and a list
/// asked for again costs a client one request.
pub(super) async fn hear_updates(
    inner: std::sync::Weak<Inner>,
    mut events: tokio::sync::broadcast::Receiver<Event>,
) {
    while let Some(event) = crate::shared::replicas::next(&mut events).await {
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let catalogue = Catalogue { inner };
        match event {
            Event::ResourceUpdated { uri } => catalogue.tell_resource_updated(&uri).await,
            Event::ToolsChanged => catalogue.tell_tools_changed_elsewhere(),
            Event::ConsentArrived => {
                if let Some(broker) = catalogue.credentials() {
                    broker.consent_arrived();
                }
            }
            Event::Call { call } => {
                if let Some(live) = catalogue.live_calls() {
                    live.heard(call);
                }
            }
            Event::CancelCall { replica, id } => {
                if let Some(live) = catalogue.live_calls()
                    && live.replica() == replica
                {
                    live.cancel_here(id);
                }
            }
            Event::StopRun { .. } => {}
        }
    }
}

/// Whether `principal` sees the same tools in both, as a client sees them.
pub(super) fn same_tools(
    old: (&Registry, &ToolSets),
    new: (&Registry, &ToolSets),
    principal: &Principal,
) -> bool {
    let old = seen(old, principal);
    let new = seen(new, principal);
    old.len() == new.len()
        && old.iter().zip(&new).all(|(a, b)| {
            a.name == b.name
                && a.description == b.description
                && a.input_schema == b.input_schema
                && a.output_schema == b.output_schema
        })
}

/// A digest of the tools `principal` sees, as a client sees them: equal digests, same tools.
fn fingerprint(registry: &Registry, sets: &ToolSets, principal: &Principal) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    for tool in seen((registry, sets), principal) {
        for part in [
            tool.name.as_str(),
            tool.description.as_str(),
            &serde_json::to_string(&*tool.input_schema).unwrap_or_default(),
            &serde_json::to_string(&tool.output_schema).unwrap_or_default(),
        ] {
            hash.update((part.len() as u64).to_le_bytes());
            hash.update(part.as_bytes());
        }
    }
    hash.finalize().into()
}

/// The tools of `registry` that `principal` sees.
fn seen<'a>((registry, sets): (&'a Registry, &ToolSets), principal: &Principal) -> Vec<&'a Tool> {
    registry
        .tools()
        .filter(|(plugin, tool)| sets.allows(principal, &plugin.name, &tool.name))
        .map(|(_, tool)| tool)
        .collect()
}
