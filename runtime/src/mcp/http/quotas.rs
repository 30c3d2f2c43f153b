//! Each principal's quota at `/mcp`: a request over its rate, or one that would run a guest
//! beyond its concurrent calls, is answered 429 with `Retry-After` and a JSON-RPC error, and
//! nothing else waits for it. A legacy session beyond the cap on sessions is refused the same
//! way before it starts, so sessions cannot exhaust memory (idle ones end on their own,
//! `session_idle`), and so is a new session on a replica that is shutting down, and, once its
//! notice period is over, a request that would run a guest there ([`super::drain`]). Each 503 is
//! "not processed": a load balancer may send the request to another replica.
//!
//! The slot a request takes here is handed to the MCP handler ([`HandedSlot`]), which holds it
//! while the guest runs: past the end of the HTTP exchange when a legacy session's call goes on
//! without its connection. The handler takes a slot of its own for any request that comes
//! without one, so this layer only decides how a refusal looks over HTTP.

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use serde_json::Value;

use crate::access::Principal;
use crate::access::quotas::{Exceeded, HandedSlot};
use crate::mcp::catalogue::Catalogue;
use crate::mcp::http::Live;
use crate::mcp::http::message::{Rpc, jsonrpc_error};
use crate::mcp::http::sessions::Sessions;

/// JSON-RPC's code for "the server refuses for now" (implementation-defined server errors).
pub const RATE_LIMITED: i32 = -32000;

/// The methods whose handling runs guest code, each in one of its principal's call slots.
pub const GUEST_METHODS: [&str; 4] = [
    "tools/call",
    "prompts/get",
    "resources/read",
    "completion/complete",
];

#[derive(Clone)]
pub struct Limiter {
    pub sessions: Sessions,
    pub catalogue: Catalogue,
    pub live: Live,
    /// How moat stops: a session opened once it is told to would soon be cut off, and new work
    /// once its notice is over would hold up the stop.
    pub drain: super::drain::Drain,
}

/// Counts the request against its principal's rate, before its body is read: a caller over its
/// rate costs moat a lookup and a short answer, nothing more.
pub async fn limit_rate(State(limiter): State<Limiter>, request: Request, next: Next) -> Response {
    if let Some(principal) = request.extensions().get::<Principal>()
        && let Err(exceeded) = limiter.catalogue.quotas().request(&principal.name).await
    {
        return too_many(&limiter, principal, Value::Null, exceeded);
    }
    next.run(request).await
}

/// Takes a call slot for a request that runs a guest, and holds a new legacy session to the
/// cap on sessions.
pub async fn limit_calls(
    State(limiter): State<Limiter>,
    mut request: Request,
    next: Next,
) -> Response {
    let extensions = request.extensions();
    let (Some(principal), Some(rpc)) = (extensions.get::<Principal>(), extensions.get::<Rpc>())
    else {
        return next.run(request).await;
    };
    let method = rpc.method.as_str();
    if method == "initialize" && !request.headers().contains_key("mcp-session-id") {
        if limiter.drain.draining.is_cancelled() {
            return draining(rpc.id.clone());
        }
        let open = limiter.sessions.open().await;
        if open >= limiter.live.gate().max_sessions {
            return too_many_sessions(&limiter, principal, rpc.id.clone(), open);
        }
    }
    if GUEST_METHODS.contains(&method) {
        if limiter.drain.stopping.is_cancelled() {
            return stopping(rpc.id.clone());
        }
        match limiter.catalogue.quotas().call(&principal.name).await {
            Ok(slot) => {
                request.extensions_mut().insert(HandedSlot::new(slot));
            }
            Err(exceeded) => return too_many(&limiter, principal, rpc.id.clone(), exceeded),
        }
        // Counted from before the guest runs: its slot is given back before its answer exists.
        let answering = limiter.drain.answering();
        let answer = next.run(request).await;
        return answering.until_written(answer);
    }
    next.run(request).await
}

/// What a new session gets from a replica that is stopping: another replica will take it.
fn draining(id: Value) -> Response {
    let mut response = jsonrpc_error(
        StatusCode::SERVICE_UNAVAILABLE,
        id,
        RATE_LIMITED,
        "this server is shutting down; retry, and another will take the session".to_string(),
    );
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

/// What new work gets from a replica that is stopping: it was not run, and another may run it.
fn stopping(id: Value) -> Response {
    let mut response = jsonrpc_error(
        StatusCode::SERVICE_UNAVAILABLE,
        id,
        RATE_LIMITED,
        "this server is shutting down and did not process the request; send it again, and \
         another will take it"
            .to_string(),
    );
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

fn too_many_sessions(limiter: &Limiter, principal: &Principal, id: Value, open: usize) -> Response {
    limiter
        .catalogue
        .metrics()
        .record_quota_rejection("sessions");
    tracing::warn!("refused a session for {principal}: {open} sessions are open, the most allowed");
    let mut response = jsonrpc_error(
        StatusCode::SERVICE_UNAVAILABLE,
        id,
        RATE_LIMITED,
        format!(
            "this server has {open} sessions open, as many as it allows; retry later, or use \
             the 2026-07-28 protocol, which needs none"
        ),
    );
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("30"));
    response
}

fn too_many(limiter: &Limiter, principal: &Principal, id: Value, exceeded: Exceeded) -> Response {
    let kind = match exceeded {
        Exceeded::Rate { .. } => "rate",
        Exceeded::Concurrency { .. } => "concurrency",
    };
    let message = exceeded.message(&principal.name);
    limiter.catalogue.metrics().record_quota_rejection(kind);
    tracing::info!("{message}");
    let mut response = jsonrpc_error(StatusCode::TOO_MANY_REQUESTS, id, RATE_LIMITED, message);
    response.headers_mut().insert(
        header::RETRY_AFTER,
        HeaderValue::from(exceeded.retry_after_seconds()),
    );
    response
}
