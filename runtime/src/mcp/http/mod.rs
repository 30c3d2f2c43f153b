//! MCP over Streamable HTTP at `/mcp`, serving the same registry as stdio, with `/healthz`,
//! `/readyz` and `/metrics` (Prometheus) beside it for whatever watches the process.
//!
//! Safe defaults for a server on a developer's machine: moat binds where it is told (the CLI
//! defaults to 127.0.0.1), accepts only loopback `Host` headers (DNS rebinding), refuses any
//! browser `Origin` that is not a loopback one (rmcp leaves Origin checks off unless asked), and
//! caps request bodies.
//!
//! Legacy clients (`initialize`, up to 2025-11-25) get an `Mcp-Session-Id` session; 2026-07-28
//! requests are served statelessly, answered as JSON unless notifications come first. A body that is not one JSON-RPC message gets JSON-RPC's own
//! answer, a 400 with -32700 (not JSON) or -32600 (not a message), where rmcp would send a bare 415.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, Result};
use axum::body::{Body, to_bytes};
use axum::extract::Request;
use axum::http::{Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::mcp::catalogue::Catalogue;
use crate::mcp::metrics;
use crate::mcp::server::MoatServer;

/// The largest JSON-RPC request body moat reads.
pub const MAX_REQUEST_BYTES: usize = 4 << 20;

/// Reads the `--http` address: `HOST:PORT`, or a bare `PORT`, which binds 127.0.0.1 (never every
/// interface by accident).
pub fn parse_listen_address(text: &str) -> Result<SocketAddr, String> {
    if let Ok(port) = text.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    text.parse()
        .map_err(|_| format!("\"{text}\" is neither PORT nor HOST:PORT (e.g. 127.0.0.1:8080)"))
}

/// Serves MCP on `addr` until `shutdown` is cancelled.
pub async fn serve(
    catalogue: Catalogue,
    addr: SocketAddr,
    shutdown: CancellationToken,
) -> Result<()> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding {addr}"))?;
    tracing::info!("serving MCP on http://{}/mcp", listener.local_addr()?);
    if !addr.ip().is_loopback() {
        tracing::warn!(
            "{addr} is reachable from other machines; moat has no authentication, and accepts \
             only loopback Host and Origin headers"
        );
    }
    axum::serve(listener, router(catalogue, shutdown.clone()))
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
        .context("serving HTTP")
}

/// The `/mcp` endpoint; each session (or stateless request) gets its own handler over the one
/// shared catalogue.
pub fn router(catalogue: Catalogue, shutdown: CancellationToken) -> axum::Router {
    let mut config = StreamableHttpServerConfig::default();
    config.allowed_origins = ["http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*"]
        .map(String::from)
        .to_vec();
    config.max_request_body_bytes = MAX_REQUEST_BYTES;
    // A 2026-07-28 answer with nothing before it goes out as plain JSON; a call that reports
    // progress or logs streams as SSE. Legacy sessions always stream.
    config.json_response = true;
    config.cancellation_token = shutdown.clone();
    let served = catalogue.clone();
    let service = StreamableHttpService::new(
        move || Ok(MoatServer::new(served.clone())),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    axum::Router::new()
        .nest_service("/mcp", service)
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/metrics", {
            let catalogue = catalogue.clone();
            get(move || {
                let text = catalogue.metrics().render(&catalogue.current());
                std::future::ready(([(header::CONTENT_TYPE, metrics::CONTENT_TYPE)], text))
            })
        })
        .route(
            "/readyz",
            get(move || std::future::ready(readiness(&catalogue, &shutdown))),
        )
        .layer(middleware::from_fn(check_message))
}

/// `/readyz`: 200 with the number of plugins and tools served while moat serves (it listens only
/// once its plugins are loaded), 503 once it is shutting down, so a load balancer stops sending
/// it requests before it stops answering them. `/healthz` only says the process answers.
fn readiness(catalogue: &Catalogue, shutdown: &CancellationToken) -> Response {
    if shutdown.is_cancelled() {
        return (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n").into_response();
    }
    let registry = catalogue.current();
    let body = json!({
        "plugins": registry.plugins().len(),
        "tools": registry.tools().count(),
    });
    (
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// Answers a JSON POST whose body is not a single JSON-RPC message as JSON-RPC says, answers a
/// successful session `DELETE` with 200 (rmcp sends 202, which the spec does not name and the
/// Python SDK logs as a failed termination), and passes every other request on untouched (the
/// body read back in).
async fn check_message(request: Request, next: Next) -> Response {
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
    let (parts, body) = request.into_parts();
    let Ok(bytes) = to_bytes(body, MAX_REQUEST_BYTES).await else {
        return (StatusCode::PAYLOAD_TOO_LARGE, "request body too large").into_response();
    };
    let value: Value = match serde_json::from_slice(&bytes) {
        Ok(value) => value,
        Err(error) => return jsonrpc_error(Value::Null, -32700, format!("Parse error: {error}")),
    };
    if let Err(error) = serde_json::from_value::<ClientJsonRpcMessage>(value.clone()) {
        // Batches (gone since 2025-06-18), a wrong `jsonrpc`, a message without a method…
        let id = value.get("id").cloned().unwrap_or(Value::Null);
        return jsonrpc_error(id, -32600, format!("Invalid Request: {error}"));
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

fn jsonrpc_error(id: Value, code: i32, message: String) -> Response {
    let body = json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}});
    (
        StatusCode::BAD_REQUEST,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_port_binds_loopback() {
        assert_eq!(
            parse_listen_address("8080"),
            Ok(SocketAddr::from(([127, 0, 0, 1], 8080)))
        );
        assert_eq!(
            parse_listen_address("[::1]:9"),
            Ok("[::1]:9".parse().unwrap())
        );
        assert!(parse_listen_address("localhost").is_err());
    }
}
