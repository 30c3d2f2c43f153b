//! What a legacy session sets after `initialize` — its log level, the resources it subscribed
//! to — told to the other replicas (when there are any), and given back when another
//! replica restores the session (rmcp marks the `initialize` it replays then). Subscriptions are
//! taken up again as if the client sent them anew: one the rules now refuse is dropped.

// MCP 2026-07-28 deprecates logging (SEP-2577), but the clients of earlier versions still ask for it.
#![allow(deprecated)]

use rmcp::RoleServer;
use rmcp::model::LoggingLevel;
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::SessionRestoreMarker;

use crate::mcp::server::MoatServer;

impl MoatServer {
    /// The legacy session this request belongs to.
    fn session_of(&self, context: &RequestContext<RoleServer>) -> Option<String> {
        let parts = context.extensions.get::<axum::http::request::Parts>()?;
        let id = parts.headers.get("mcp-session-id")?.to_str().ok()?;
        self.is_in_session().then(|| id.to_string())
    }

    /// Keeps the log level the session now has, for whichever replica serves it next.
    pub(crate) async fn keep_log_level(&self, context: &RequestContext<RoleServer>) {
        if let Some(id) = self.session_of(context)
            && let Ok(serde_json::Value::String(level)) = serde_json::to_value(self.log_level())
        {
            let sessions = self.catalogue.backends().sessions.clone();
            sessions.keep_log_level(&id, &level).await;
        }
    }

    /// Keeps the resources the session now follows, for whichever replica serves it next.
    pub(crate) async fn keep_subscriptions(&self, context: &RequestContext<RoleServer>) {
        if let Some(id) = self.session_of(context) {
            let uris: Vec<String> = self.subscriptions().into_iter().collect();
            let sessions = self.catalogue.backends().sessions.clone();
            sessions.keep_subscriptions(&id, &uris).await;
        }
    }

    /// Gives a session another replica opened what it had set there, when `context` is the
    /// `initialize` rmcp replays to restore it.
    pub(crate) async fn restore_settings(&self, context: &RequestContext<RoleServer>) {
        let Some(marker) = context.extensions.get::<SessionRestoreMarker>() else {
            return;
        };
        let sessions = self.catalogue.backends().sessions.clone();
        let (level, uris) = sessions.settings(&marker.id).await;
        if let Some(level) =
            level.and_then(|level| serde_json::from_value::<LoggingLevel>(level.into()).ok())
        {
            self.set_log_level(level);
        }
        for uri in uris {
            if let Err(error) = self.subscribe_to(&uri, &self.subscribed, context) {
                tracing::debug!(
                    "a restored session's subscription is dropped: {}",
                    error.message
                );
            }
        }
    }
}
