//! rmcp's refusals of a `Host` or `Origin` that moat does not serve (its defence against DNS
//! rebinding) are plain text saying only "not allowed"; every other refusal of moat's is JSON
//! with the fix. This layer turns those into the same: what was refused, and what moat accepts.
//! rmcp makes the check itself, so it stays the one place that decides.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// rmcp's bodies for the refusals rewritten here.
const HOST_REFUSED: &[u8] = b"Forbidden: Host header is not allowed";
const ORIGIN_REFUSED: &[u8] = b"Forbidden: Origin header is not allowed";
/// More than any of them: a longer body is not one of rmcp's refusals.
const MAX_REFUSAL_BYTES: usize = 256;

/// Runs the request; a `Host` or `Origin` refusal comes back as JSON.
pub async fn as_json(request: Request, next: Next) -> Response {
    let (host, origin) = (
        shown(request.headers(), header::HOST),
        shown(request.headers(), header::ORIGIN),
    );
    let response = next.run(request).await;
    // rmcp's refusals carry no content type; moat's own are JSON already.
    if response.status() != StatusCode::FORBIDDEN
        || response.headers().contains_key(header::CONTENT_TYPE)
    {
        return response;
    }
    let (parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_REFUSAL_BYTES).await else {
        return StatusCode::FORBIDDEN.into_response();
    };
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
