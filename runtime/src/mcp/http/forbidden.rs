//! rmcp's refusals of a `Host` or `Origin` that moat does not serve (its defence against DNS
//! rebinding) are plain text saying only "not allowed", and its refusal of a request with
//! neither a session nor the 2026-07-28 `_meta` says only "Session ID is required", which sends
//! a 2026-07-28 client the wrong way; every other refusal of moat's is JSON with the fix. This
//! layer turns those into the same: what was refused, and what moat accepts. rmcp makes the
//! checks itself, so it stays the one place that decides.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::message::{Rpc, jsonrpc_error};

/// rmcp's bodies for the refusals rewritten here.
const HOST_REFUSED: &[u8] = b"Forbidden: Host header is not allowed";
const ORIGIN_REFUSED: &[u8] = b"Forbidden: Origin header is not allowed";
const NO_SESSION: &[u8] = b"Bad Request: Session ID is required";
/// JSON-RPC's code for a request that is not a valid one here.
const INVALID_REQUEST: i32 = -32600;
/// More than any of them: a longer body is not one of rmcp's refusals.
const MAX_REFUSAL_BYTES: usize = 256;

/// Runs the request; a `Host` or `Origin` refusal comes back as JSON.
pub async fn as_json(request: Request, next: Next) -> Response {
    let (host, origin) = (
        shown(request.headers(), header::HOST),
        shown(request.headers(), header::ORIGIN),
    );
    let id = request.extensions().get::<Rpc>().map(|rpc| rpc.id.clone());
    let response = next.run(request).await;
    // rmcp's refusals carry no content type; moat's own are JSON already.
    let status = response.status();
    if !matches!(status, StatusCode::FORBIDDEN | StatusCode::BAD_REQUEST)
        || response.headers().contains_key(header::CONTENT_TYPE)
    {
        return response;
    }
    let (parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_REFUSAL_BYTES).await else {
        return status.into_response();
    };
    if &*bytes == NO_SESSION {
        return jsonrpc_error(
            StatusCode::BAD_REQUEST,
            id.unwrap_or(Value::Null),
            INVALID_REQUEST,
            "this request names no session and no protocol version: either send `initialize` \
             first and then its Mcp-Session-Id header with every request (protocol 2025-11-25 \
             and before), or send each request on its own with protocol 2026-07-28, whose \
             params._meta carries io.modelcontextprotocol/protocolVersion = \"2026-07-28\" \
             (and its clientInfo and clientCapabilities), with the MCP-Protocol-Version header"
                .to_string(),
        );
    }
    let description = match &*bytes {
        HOST_REFUSED => format!(
            "moat does not serve the Host {}: use a loopback name (127.0.0.1, localhost, [::1]) \
             or a name in [http] hosts of moat.toml",
            quoted(host)
        ),
        ORIGIN_REFUSED => format!(
            "moat does not serve pages of the Origin {}: only loopback origins and those in \
             [http] origins of moat.toml may call it from a browser",
            quoted(origin)
        ),
        _ => return Response::from_parts(parts, Body::from(bytes)),
    };
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    let body = json!({"error": "forbidden", "error_description": description});
    (StatusCode::FORBIDDEN, headers, body.to_string()).into_response()
}

/// The value of header `name`, as text.
fn shown(headers: &HeaderMap, name: header::HeaderName) -> Option<String> {
    headers
        .get(name)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
}

/// A header's value as the description shows it, or that there was none.
fn quoted(value: Option<String>) -> String {
    match value {
        Some(value) => format!("\"{value}\""),
        None => "(none given)".into(),
    }
}
