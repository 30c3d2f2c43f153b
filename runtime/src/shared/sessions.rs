//! Legacy sessions (`Mcp-Session-Id`) as the other replicas know them: who opened each, what it
//! set since (its log level, its subscriptions), and what rmcp restores one from on a replica
//! that did not open it. [`Alone`] is a moat with no other replica: its sessions live in rmcp's
//! session manager only, and there is nothing to tell or restore. Under `[cluster]` Redis keeps
//! them (`cluster::sessions`), and restores one only for the principal that opened it.
//!
//! A store that cannot be reached is no error to a session: it lives on the replica that
//! opened it, as under [`Alone`].

use std::sync::Arc;

use async_trait::async_trait;
use rmcp::transport::streamable_http_server::session::SessionStore;

/// What the other replicas know of legacy sessions.
#[async_trait]
pub trait SessionRecords: Send + Sync {
    /// The principal that opened session `id` on another replica, if one did.
    async fn owner(&self, id: &str) -> Option<String>;

    /// Records that `principal` opened session `id` here.
    async fn opened(&self, id: &str, principal: &str);

    /// Keeps session `id` for another idle period: it has just been used here. The request
    /// goes on meanwhile: a backend that must ask a store does so on a task of its own.
    fn touch(self: Arc<Self>, id: &str);

    /// Counts a session another replica opened, restored here.
    fn restored(&self);

    /// Records the log level session `id` asked for.
    async fn keep_log_level(&self, id: &str, level: &str);

    /// Records the resources session `id` is subscribed to.
    async fn keep_subscriptions(&self, id: &str, uris: &[String]);

    /// What session `id` set where it was opened: its log level and its subscriptions.
    async fn settings(&self, id: &str) -> (Option<String>, Vec<String>);

    /// What rmcp restores a session another replica opened from; `None` where there is none.
    fn restorer(self: Arc<Self>) -> Option<Arc<dyn SessionStore>>;
}

/// A moat with no other replica: its sessions are all its own.
pub struct Alone;

#[async_trait]
impl SessionRecords for Alone {
    async fn owner(&self, _: &str) -> Option<String> {
        None
    }

    async fn opened(&self, _: &str, _: &str) {}

    fn touch(self: Arc<Self>, _: &str) {}

    fn restored(&self) {}

    async fn keep_log_level(&self, _: &str, _: &str) {}

    async fn keep_subscriptions(&self, _: &str, _: &[String]) {}

    async fn settings(&self, _: &str) -> (Option<String>, Vec<String>) {
        (None, Vec::new())
    }

    fn restorer(self: Arc<Self>) -> Option<Arc<dyn SessionStore>> {
        None
    }
}

/// A session id as logs, spans and the audit log name it: whoever holds the id itself may use
/// the session (as its owner), so only a digest is written down.
pub fn digest(id: &str) -> String {
    use sha2::Digest as _;
    let hash = sha2::Sha256::digest(id.as_bytes());
    hash[..8].iter().map(|b| format!("{b:02x}")).collect()
}
