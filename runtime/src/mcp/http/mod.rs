//! MCP over Streamable HTTP at `/mcp`, serving the same registry as stdio, with `/healthz`,
//! `/readyz` and `/metrics` (Prometheus) beside it for whatever watches the process.
//!
//! In front of `/mcp`, in order: [`auth`] (who is calling; a bearer credential is required
//! unless authentication was turned off), the caller's rate ([`quotas`]), [`message`] (one
//! JSON-RPC message per POST), and the caller's concurrent calls and the cap on sessions. The MCP handler finds the
//! caller's [`crate::access::Principal`] in the request.
//!
//! Safe defaults: moat binds where it is told (the CLI defaults to 127.0.0.1), accepts only
//! loopback `Host` headers and `Origin`s unless the configuration names others (DNS
//! rebinding), and caps request bodies. TLS ([`tls`]) when given a certificate.
//!
//! Legacy clients (`initialize`, up to 2025-11-25) get an `Mcp-Session-Id` session; 2026-07-28
//! requests are served statelessly, answered as JSON unless notifications come first.

pub mod auth;
pub mod message;
pub mod quotas;
pub mod tls;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use axum::http::{StatusCode, header};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::serve::ListenerExt as _;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::access::Principal;
use crate::access::quotas::Quotas;
use crate::mcp::catalogue::Catalogue;
use crate::mcp::http::auth::{Authentication, Guard};
use crate::mcp::http::quotas::Limiter;
use crate::mcp::metrics;
use crate::mcp::server::MoatServer;

/// How `moat serve --http` serves: who may call, from where, how much, over what.
pub struct Settings {
    pub authentication: Authentication,
    /// `Host` names accepted besides loopback ones (`tools.example.com`, `host:port`).
    pub hosts: Vec<String>,
    /// Browser `Origin`s accepted besides loopback ones (`https://app.example.com`).
    pub origins: Vec<String>,
    /// Proxies whose `X-Forwarded-For` names the caller.
    pub trusted_proxies: Vec<IpAddr>,
    pub quotas: Quotas,
    /// Legacy sessions open at once, at most.
    pub max_sessions: usize,
    /// A legacy session that hears nothing for this long ends.
    pub session_idle: Duration,
    /// The certificate chain and key to serve HTTPS with.
    pub tls: Option<tls::Files>,
    /// Serve `/metrics` on this address instead, unauthenticated.
    pub metrics_listener: Option<SocketAddr>,
}

/// Legacy sessions open at once unless configured.
pub const DEFAULT_MAX_SESSIONS: usize = 1000;
/// A legacy session's idle time unless configured.
pub const DEFAULT_SESSION_IDLE: Duration = Duration::from_secs(300);

impl Settings {
    /// Serving with this authentication and every other setting at its default.
    pub fn new(authentication: Authentication) -> Self {
        Self {
            authentication,
            hosts: Vec::new(),
            origins: Vec::new(),
            trusted_proxies: Vec::new(),
            quotas: Quotas::default(),
            max_sessions: DEFAULT_MAX_SESSIONS,
            session_idle: DEFAULT_SESSION_IDLE,
            tls: None,
            metrics_listener: None,
        }
    }
}

/// The largest JSON-RPC request body moat reads.
pub const MAX_REQUEST_BYTES: usize = 4 << 20;

/// Reads the `--http` address: `HOST:PORT` with an IP address or `localhost` (127.0.0.1), or a
/// bare `PORT`, which binds 127.0.0.1 (never every interface by accident).
pub fn parse_listen_address(text: &str) -> Result<SocketAddr, String> {
    if let Ok(port) = text.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    if let Ok(addr) = text.parse() {
        return Ok(addr);
    }
    // Why not, precisely: the host, the port, or the brackets IPv6 needs.
    let Some((host, port)) = text.rsplit_once(':') else {
        return Err(match text.parse::<std::net::IpAddr>() {
            Ok(_) => format!("\"{text}\" has no port: give {text}:PORT"),
            Err(_) if text.eq_ignore_ascii_case("localhost") => {
                "\"localhost\" has no port: give localhost:PORT".into()
            }
            Err(_) => format!(
                "\"{text}\" is neither a PORT (0 to 65535) nor HOST:PORT (e.g. 127.0.0.1:8080)"
            ),
        });
    };
    let port: u16 = port
        .parse()
        .map_err(|_| format!("\"{text}\": the port \"{port}\" is not a number from 0 to 65535"))?;
    if host.eq_ignore_ascii_case("localhost") {
        // What localhost means to every client on this machine; binding does not resolve names.
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    if host.contains(':') && !host.starts_with('[') {
        return Err(format!(
            "\"{text}\": an IPv6 address goes in brackets, as in [::1]:{port}"
        ));
    }
    Err(format!(
        "\"{text}\": the host \"{host}\" is not an IP address (moat binds addresses, and \
         resolves only localhost); give one such as 127.0.0.1, [::1] or 0.0.0.0"
    ))
}

/// Serves MCP on `addr` until `shutdown` is cancelled.
pub async fn serve(
    catalogue: Catalogue,
    addr: SocketAddr,
    settings: Settings,
    shutdown: CancellationToken,
) -> Result<()> {
    if let Some(metrics_addr) = settings.metrics_listener {
        let listener = tokio::net::TcpListener::bind(metrics_addr)
            .await
            .with_context(|| format!("binding the metrics listener {metrics_addr}"))?;
        tracing::info!(
            "serving /metrics on http://{}/metrics",
            listener.local_addr()?
        );
        let app = axum::Router::new().route("/metrics", metrics_route(catalogue.clone()));
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let served = axum::serve(listener, app)
                .with_graceful_shutdown(async move { shutdown.cancelled().await })
                .await;
            if let Err(error) = served {
                tracing::error!("the metrics listener stopped: {error}");
            }
        });
    }
    let tls = settings.tls.clone();
    let app = router(catalogue, shutdown.clone(), settings)
        .into_make_service_with_connect_info::<SocketAddr>();
    match tls {
        Some(files) => tls::serve(app, addr, files, shutdown).await,
        None => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("binding {addr}"))?;
            tracing::info!("serving MCP on http://{}/mcp", listener.local_addr()?);
            axum::serve(listener.tap_io(no_delay), app)
                .with_graceful_shutdown(async move { shutdown.cancelled().await })
                .await
                .context("serving HTTP")
        }
    }
}

/// Sends small writes at once. An answer goes out in pieces (headers, then an SSE event), and
/// with Nagle's algorithm the last piece waits for the client's delayed ACK: 40 ms a call.
pub fn no_delay(stream: &mut tokio::net::TcpStream) {
    if let Err(error) = stream.set_nodelay(true) {
        tracing::debug!("TCP_NODELAY on an accepted connection: {error}");
    }
}

/// The `/mcp` endpoint behind its layers, and the endpoints beside it; each session (or
/// stateless request) gets its own handler over the one shared catalogue.
pub fn router(
    catalogue: Catalogue,
    shutdown: CancellationToken,
    settings: Settings,
) -> axum::Router {
    let mut config = StreamableHttpServerConfig::default();
    let loopback_origins = ["http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*"];
    config.allowed_origins = loopback_origins
        .into_iter()
        .map(String::from)
        .chain(settings.origins.iter().cloned())
        .collect();
    config.allowed_hosts.extend(settings.hosts.iter().cloned());
    config.max_request_body_bytes = MAX_REQUEST_BYTES;
    // A 2026-07-28 answer with nothing before it goes out as plain JSON; a call that reports
    // progress or logs streams as SSE. Legacy sessions always stream.
    config.json_response = true;
    config.cancellation_token = shutdown.clone();
    let mut sessions = LocalSessionManager::default();
    sessions.session_config.keep_alive = Some(settings.session_idle);
    let sessions = Arc::new(sessions);
    let served = catalogue.clone();
    let service = StreamableHttpService::new(
        move || Ok(MoatServer::for_caller(served.clone())),
        sessions.clone(),
        config,
    );
    let limiter = Limiter {
        quotas: Arc::new(settings.quotas),
        sessions,
        max_sessions: settings.max_sessions,
        catalogue: catalogue.clone(),
    };
    let metadata = match &settings.authentication {
        Authentication::Required {
            resource: Some(resource),
            ..
        } => Some(resource.clone()),
        _ => None,
    };
    let guard = Guard {
        authentication: Arc::new(settings.authentication),
        trusted_proxies: Arc::new(settings.trusted_proxies),
        catalogue: catalogue.clone(),
    };
    let mcp = axum::Router::new()
        .nest_service("/mcp", service)
        .layer(middleware::from_fn(acting_for))
        .layer(middleware::from_fn_with_state(
            limiter.clone(),
            quotas::limit_calls,
        ))
        .layer(middleware::from_fn(message::check_message))
        .layer(middleware::from_fn_with_state(limiter, quotas::limit_rate));
    let mut guarded = mcp;
    if settings.metrics_listener.is_none() {
        guarded = guarded.route("/metrics", metrics_route(catalogue.clone()));
    }
    let guarded = guarded.layer(middleware::from_fn_with_state(guard, auth::authenticate));
    let mut open = axum::Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route(
            "/readyz",
            get(move || std::future::ready(readiness(&catalogue, &shutdown))),
        );
    if let Some(resource) = metadata {
        let document = resource.document().to_string();
        let answer = move || {
            let document = document.clone();
            std::future::ready(([(header::CONTENT_TYPE, "application/json")], document))
        };
        open = open.route("/.well-known/oauth-protected-resource", get(answer.clone()));
        let path = resource.metadata_path();
        if path != "/.well-known/oauth-protected-resource" {
            open = open.route(&path, get(answer));
        }
    }
    open.merge(guarded)
}

/// Handles the request for the caller [`auth`] established, also where rmcp asks the handler
/// something without the request (see [`MoatServer::for_caller`]).
async fn acting_for(request: axum::extract::Request, next: middleware::Next) -> Response {
    match request.extensions().get::<Principal>().cloned() {
        Some(caller) => MoatServer::acting_for(caller, next.run(request)).await,
        None => next.run(request).await,
    }
}

fn metrics_route(catalogue: Catalogue) -> axum::routing::MethodRouter {
    get(move || {
        let text = catalogue.metrics().render(&catalogue.current());
        std::future::ready(([(header::CONTENT_TYPE, metrics::CONTENT_TYPE)], text))
    })
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
        assert_eq!(
            parse_listen_address("localhost:8080"),
            Ok(SocketAddr::from(([127, 0, 0, 1], 8080)))
        );
        let error = |text| parse_listen_address(text).unwrap_err();
        assert!(error("localhost").contains("no port"));
        assert!(error("localhost:99999").contains("port \"99999\""));
        assert!(error("example.com:80").contains("not an IP address"));
        assert!(error("::1:80").contains("brackets"));
    }
}
