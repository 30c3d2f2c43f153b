//! Legacy sessions (`Mcp-Session-Id`, up to protocol 2025-11-25): how many may be open, and
//! whose each one is.
//!
//! A session belongs to the principal that opened it. Whoever else presents its id (a leaked
//! log line, a shared proxy) is answered exactly as for a session that does not exist, a 404,
//! on every method: it can neither post to it (answering the question its guest waits on) nor
//! read its stream nor end it.
//!
//! When replicas share state, a session opened on one is served by any ([`SessionRecords`]):
//! the owner is looked up there for an id this replica does not know, and rmcp restores the
//! session (replaying its `initialize`) only for that owner.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;

use crate::access::Principal;
use crate::shared::sessions::SessionRecords;
pub use crate::shared::sessions::digest;

const SESSION_HEADER: &str = "mcp-session-id";

/// The sessions rmcp keeps, with the principal each belongs to.
#[derive(Clone)]
pub struct Sessions {
    manager: Arc<LocalSessionManager>,
    /// Session id → the name of the principal that opened it, for the sessions on this replica.
    owners: Arc<Mutex<HashMap<String, String>>>,
    /// What the other replicas know of sessions.
    shared: Arc<dyn SessionRecords>,
}

impl Sessions {
    pub fn new(manager: Arc<LocalSessionManager>, shared: Arc<dyn SessionRecords>) -> Self {
        Self {
            manager,
            owners: Arc::default(),
            shared,
        }
    }

    async fn is_here(&self, id: &str) -> bool {
        let live = self.manager.sessions.read().await;
        live.keys().any(|live| live.as_ref() == id)
    }

    /// Sessions open now.
    pub async fn open(&self) -> usize {
        self.manager.sessions.read().await.len()
    }

    fn owner(&self, id: &str) -> Option<String> {
        self.owners.lock().expect("owners lock").get(id).cloned()
    }

    fn remember(&self, id: &str, principal: &str) {
        let mut owners = self.owners.lock().expect("owners lock");
        owners.insert(id.to_string(), principal.to_string());
    }

    /// Records that `principal` opened session `id`, forgetting the owners of ended sessions.
    async fn opened(&self, id: &str, principal: &str) {
        let live = self.manager.sessions.read().await;
        let mut owners = self.owners.lock().expect("owners lock");
        owners.retain(|id, _| live.keys().any(|live| live.as_ref() == id.as_str()));
        owners.insert(id.to_string(), principal.to_string());
    }
}

/// Refuses a request that names a session another principal opened (404, as for no session),
/// and records the owner of each session a request opens.
pub async fn bind_to_principal(
    State(sessions): State<Sessions>,
    request: Request,
    next: Next,
) -> Response {
    let Some(principal) = request
        .extensions()
        .get::<Principal>()
        .map(|p| p.name.clone())
    else {
        return next.run(request).await;
    };
    if let Some(id) = session_id(request.headers()) {
        let here = sessions.owner(&id);
        let owner = match &here {
            Some(owner) => Some(owner.clone()),
            None => sessions.shared.owner(&id).await,
        };
        // An id no session has is for rmcp to answer: a 2026-07-28 request may carry one.
        if let Some(owner) = owner
            && owner != principal
        {
            tracing::warn!(
                "refused {principal} a session another principal opened (session {})",
                digest(&id)
            );
            return not_found();
        }
        let shared = sessions.shared.clone();
        if here.is_some() {
            // Used: kept for another idle period, for whichever replica serves it next.
            shared.touch(&id);
            return next.run(request).await;
        }
        let response = next.run(request).await;
        if sessions.is_here(&id).await {
            // rmcp restored it from the shared store, which hands a session to its owner only.
            shared.restored();
            sessions.remember(&id, &principal);
            tracing::info!(
                "restored session {} of {principal}, opened by another replica",
                digest(&id)
            );
        }
        return response;
    }
    let response = next.run(request).await;
    if let Some(id) = session_id(response.headers()) {
        sessions.opened(&id, &principal).await;
        sessions.shared.opened(&id, &principal).await;
    }
    response
}

fn session_id(headers: &HeaderMap) -> Option<String> {
    headers
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// What rmcp answers for a session it does not have.
fn not_found() -> Response {
    (StatusCode::NOT_FOUND, "Not Found: Session not found").into_response()
}
