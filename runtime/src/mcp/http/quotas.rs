//! Each principal's quota at `/mcp`: a request over its rate, or a `tools/call` beyond its
//! concurrent calls, is answered 429 with `Retry-After` and a JSON-RPC error, and nothing else
//! waits for it. A legacy session beyond the cap on sessions is refused the same way before it
//! starts, so sessions cannot exhaust memory (idle ones end on their own, `session_idle`).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use futures_util::StreamExt as _;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use serde_json::Value;

use crate::access::Principal;
use crate::access::quotas::{Exceeded, Quotas};
use crate::mcp::catalogue::Catalogue;
use crate::mcp::http::message::{Rpc, jsonrpc_error};

/// JSON-RPC's code for "the server refuses for now" (implementation-defined server errors).
const RATE_LIMITED: i32 = -32000;

#[derive(Clone)]
pub struct Limiter {
    pub quotas: Arc<Quotas>,
    pub sessions: Arc<LocalSessionManager>,
    pub max_sessions: usize,
    pub catalogue: Catalogue,
}

/// Counts the request against its principal's rate, before its body is read: a caller over its
/// rate costs moat a lookup and a short answer, nothing more.
pub async fn limit_rate(State(limiter): State<Limiter>, request: Request, next: Next) -> Response {
    if let Some(principal) = request.extensions().get::<Principal>()
        && let Err(exceeded) = limiter.quotas.request(&principal.name)
    {
        return too_many(&limiter, principal, Value::Null, exceeded);
    }
    next.run(request).await
}

/// Holds a `tools/call` to its principal's concurrent calls, and a new legacy session to the
/// cap on sessions.
pub async fn limit_calls(State(limiter): State<Limiter>, request: Request, next: Next) -> Response {
    let extensions = request.extensions();
    let (Some(principal), Some(rpc)) = (extensions.get::<Principal>(), extensions.get::<Rpc>())
    else {
        return next.run(request).await;
    };
    let permit = match rpc.method.as_str() {
        "initialize" if !request.headers().contains_key("mcp-session-id") => {
            let open = limiter.sessions.sessions.read().await.len();
            if open >= limiter.max_sessions {
                return too_many_sessions(&limiter, principal, rpc.id.clone(), open);
            }
            None
        }
        "tools/call" => match limiter.quotas.call(&principal.name) {
            Ok(permit) => permit,
            Err(exceeded) => return too_many(&limiter, principal, rpc.id.clone(), exceeded),
        },
        _ => None,
    };
    let response = next.run(request).await;
    match permit {
        // The slot is held until the answer has gone out, stream or not.
        Some(permit) => response.map(|body| {
            Body::from_stream(body.into_data_stream().map(move |chunk| {
                let _held = &permit;
                chunk
            }))
        }),
        None => response,
    }
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
    let (kind, retry_after, message) = match exceeded {
        Exceeded::Rate { retry_after } => {
            let seconds = retry_after.as_secs_f64().ceil().max(1.0) as u64;
            (
                "rate",
                seconds,
                format!(
                    "{} is over its request rate; retry in {seconds} s",
                    principal.name
                ),
            )
        }
        Exceeded::Concurrency { limit } => (
            "concurrency",
            1,
            format!(
                "{} already has {limit} calls running, as many as its quota allows; retry when \
                 one has finished",
                principal.name
            ),
        ),
    };
    limiter.catalogue.metrics().record_quota_rejection(kind);
    tracing::info!("{message}");
    let mut response = jsonrpc_error(StatusCode::TOO_MANY_REQUESTS, id, RATE_LIMITED, message);
    response.headers_mut().insert(
        header::RETRY_AFTER,
        HeaderValue::from_str(&retry_after.to_string()).expect("digits"),
    );
    response
}
