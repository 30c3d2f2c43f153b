//! The body of every POST to `/mcp`, read once: a body that is not one JSON-RPC message gets
//! JSON-RPC's own answer, a 400 with -32700 (not JSON) or -32600 (not a message), where rmcp
//! would send a bare 415; a message's id and method are left in the request's extensions for
//! the layers after this one ([`Rpc`]).
//!
//! The layers after this one limit calls and sessions by the method they find here, so no POST
//! reaches rmcp unread: one whose media type is not `application/json` (compared as rmcp
//! compares it, case and parameters aside) is answered 415 here.

use axum::body::{Body, to_bytes};
use axum::extract::Request;
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::model::ClientJsonRpcMessage;
use serde_json::{Value, json};

use crate::mcp::http::MAX_REQUEST_BYTES;

/// The largest `initialize` a session keeps: its params are stored with the session (in Redis,
/// under `[cluster]`), and a client has no need for more than a few KiB of `capabilities`,
/// `clientInfo`, `experimental` and `_meta`.
pub const MAX_INITIALIZE_BYTES: usize = 64 << 10;

/// The JSON-RPC message a POST carries: its id (`null` for a notification) and method.
#[derive(Clone, Debug)]
pub struct Rpc {
    pub id: Value,
    pub method: String,
}

/// Checks a JSON POST's body, answers a successful session `DELETE` with 200 (rmcp sends 202,
/// which the spec does not name and the Python SDK logs as a failed termination), and passes
/// every other request on untouched (the body read back in).
pub async fn check_message(request: Request, next: Next) -> Response {
    if request.method() == Method::DELETE {
        let mut response = next.run(request).await;
        if response.status() == StatusCode::ACCEPTED {
            *response.status_mut() = StatusCode::OK;
        }
        return response;
    }
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    if !is_json(request.headers()) {
        return (
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Unsupported Media Type: Content-Type must be application/json",
        )
            .into_response();
    }
    let (mut parts, body) = request.into_parts();
    let Ok(bytes) = to_bytes(body, MAX_REQUEST_BYTES).await else {
        return (StatusCode::PAYLOAD_TOO_LARGE, "request body too large").into_response();
    };
    let value: Value = match serde_json::from_slice(&bytes) {
        Ok(value) => value,
        Err(error) => {
            return jsonrpc_error(
                StatusCode::BAD_REQUEST,
                Value::Null,
                -32700,
                format!("Parse error: {error}"),
            );
        }
    };
    let id = value.get("id").cloned().unwrap_or(Value::Null);
    let method = value
        .get("method")
        .and_then(Value::as_str)
        .map(str::to_string);
    if let Err(error) = serde_json::from_value::<ClientJsonRpcMessage>(value) {
        // Batches (gone since 2025-06-18), a wrong `jsonrpc`, a message without a method…
        return jsonrpc_error(
            StatusCode::BAD_REQUEST,
            id,
            -32600,
            format!("Invalid Request: {error}"),
        );
    }
    if method.as_deref() == Some("initialize") && bytes.len() > MAX_INITIALIZE_BYTES {
        return jsonrpc_error(
            StatusCode::BAD_REQUEST,
            id,
            -32602,
            format!(
                "Invalid params: an initialize of {} bytes is more than the {} KiB a session \
                 keeps; send less in `capabilities.experimental` and `_meta`",
                bytes.len(),
                MAX_INITIALIZE_BYTES >> 10
            ),
        );
    }
    if let Some(method) = method {
        parts.extensions.insert(Rpc { id, method });
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// Whether `headers` say the body is JSON: the media type's essence, before any parameter, is
/// `application/json` in any case (RFC 9110 makes type and subtype case-insensitive).
fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            let essence = v.split_once(';').map_or(v, |(essence, _)| essence);
            essence.trim().eq_ignore_ascii_case("application/json")
        })
}

/// A JSON-RPC error answer with this HTTP status.
pub fn jsonrpc_error(status: StatusCode, id: Value, code: i32, message: String) -> Response {
    let body = json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}});
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_media_type_is_read_as_rmcp_reads_it() {
        let json = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::CONTENT_TYPE, value.parse().unwrap());
            is_json(&headers)
        };
        for value in [
            "application/json",
            "Application/JSON",
            "APPLICATION/JSON; charset=utf-8",
            " application/json ;charset=UTF-8",
        ] {
            assert!(json(value), "{value}");
        }
        for value in ["application/jsonx", "text/json", "application/json-seq", ""] {
            assert!(!json(value), "{value}");
        }
        assert!(!is_json(&HeaderMap::new()));
    }
}
