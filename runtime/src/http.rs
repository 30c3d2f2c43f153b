//! MCP over Streamable HTTP at `/mcp`, serving the same registry as stdio.
//!
//! Safe defaults for a server on a developer's machine: moat binds where it is told (the CLI
//! defaults to 127.0.0.1), accepts only loopback `Host` headers (DNS rebinding), refuses any
//! browser `Origin` that is not a loopback one (rmcp leaves Origin checks off unless asked), and
//! caps request bodies.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, Result};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use crate::catalogue::Catalogue;
use crate::server::MoatServer;

/// The largest JSON-RPC request body moat reads.
pub const MAX_REQUEST_BYTES: usize = 4 << 20;

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
    config.cancellation_token = shutdown;
    let service = StreamableHttpService::new(
        move || Ok(MoatServer::new(catalogue.clone())),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    axum::Router::new().nest_service("/mcp", service)
}
