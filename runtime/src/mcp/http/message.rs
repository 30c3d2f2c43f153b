//! The body of a JSON POST to `/mcp`, read once: a body that is not one JSON-RPC message gets
//! JSON-RPC's own answer, a 400 with -32700 (not JSON) or -32600 (not a message), where rmcp
//! would send a bare 415; a message's id and method are left in the request's extensions for
//! the layers after this one ([`Rpc`]).

use axum::body::{Body, to_bytes};
use axum::extract::Request;
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::model::ClientJsonRpcMessage;
use serde_json::{Value, json};

use crate::mcp::http::MAX_REQUEST_BYTES;

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
    let is_json = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if request.method() != Method::POST || !is_json {
        return next.run(request).await;
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
    if let Some(method) = method {
        parts.extensions.insert(Rpc { id, method });
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
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
