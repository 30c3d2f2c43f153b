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
//! Legacy clients (`initialize`, up to 2025-11-25) get an `Mcp-Session-Id` session, bound to
//! the principal that opened it ([`sessions`]); 2026-07-28 requests are served statelessly,
//! answered as JSON unless notifications come first.
//!
//! A reload changes who may call and through which proxies, and how many sessions may be open,
//! from the next request on ([`Live`]); what the listener and rmcp were built with (hosts,
//! origins, TLS files, the metrics listener, the idle time of sessions) waits for a restart.

pub mod auth;
pub mod consent;
mod direct;
pub mod drain;
mod forbidden;
pub mod message;
pub mod quotas;
pub mod scrape;
pub mod sessions;
pub mod tls;

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock, RwLock};
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

use crate::mcp::catalogue::Catalogue;
use crate::mcp::http::auth::{Authentication, Guard};
use crate::mcp::http::drain::Drain;
use crate::mcp::http::quotas::Limiter;
use crate::mcp::http::sessions::Sessions;
use crate::mcp::server::MoatServer;

pub use self::direct::Direct;

/// What is served beside `/mcp` (the operator's console), made from a way to call `/mcp` as a
/// principal moat already knows.
pub type Beside = Box<dyn FnOnce(Direct) -> axum::Router + Send>;

/// How `moat serve --http` serves: who may call, from where, how much, over what.
pub struct Settings {
    pub authentication: Authentication,
    /// `Host` names accepted besides loopback ones (`tools.example.com`, `host:port`).
    pub hosts: Vec<String>,
    /// Browser `Origin`s accepted besides loopback ones (`https://app.example.com`).
    pub origins: Vec<String>,
    /// Proxies whose `X-Forwarded-For` names the caller.
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// Legacy sessions open at once, at most.
    pub max_sessions: usize,
    /// A legacy session that hears nothing for this long ends.
    pub session_idle: Duration,
    /// The certificate chain and key to serve HTTPS with.
    pub tls: Option<tls::Files>,
    /// Serve `/metrics` on this address instead, unauthenticated.
    pub metrics_listener: Option<SocketAddr>,
    /// Where a reload applies new settings while these serve.
    pub live: Live,
    /// How moat stops: `drain.draining` is cancelled when it is told to ([`drain`](self::drain)).
    pub drain: Drain,
    /// What is served beside `/mcp`, outside its authentication.
    pub beside: Option<Beside>,
    /// Serve `beside` on the metrics listener instead, when there is one.
    pub beside_on_metrics: bool,
}

/// What a reload may change while moat serves: read once by each request, as it is then.
pub struct Gate {
    pub authentication: Authentication,
    pub trusted_proxies: Vec<ipnet::IpNet>,
    pub max_sessions: usize,
}

/// What moat started listening with, which only a restart changes.
#[derive(Clone, Debug, PartialEq)]
pub struct Listening {
    pub hosts: Vec<String>,
    pub origins: Vec<String>,
    pub session_idle: Duration,
    pub tls: Option<tls::Files>,
    pub metrics_listener: Option<SocketAddr>,
    pub drain: Duration,
    pub drain_finish: Duration,
}

impl Settings {
    fn split(self) -> (Gate, Listening) {
        let listening = Listening::of(&self);
        let gate = Gate {
            authentication: self.authentication,
            trusted_proxies: self.trusted_proxies,
            max_sessions: self.max_sessions,
        };
        (gate, listening)
    }
}

/// The settings HTTP serves with now; cloning shares them. Set when the router is made.
#[derive(Clone, Default)]
pub struct Live {
    gate: Arc<RwLock<Option<Arc<Gate>>>>,
    listening: Arc<OnceLock<Listening>>,
}

impl Live {
    /// The gate requests pass now.
    pub fn gate(&self) -> Arc<Gate> {
        self.gate
            .read()
            .expect("gate lock")
            .clone()
            .expect("the gate is set before anything is served")
    }

    fn start(&self, gate: Gate, listening: Listening) {
        *self.gate.write().expect("gate lock") = Some(Arc::new(gate));
        let _ = self.listening.set(listening);
    }

    /// The settings `settings` would change that only a restart changes, by name.
    pub fn restart_needed(&self, settings: &Settings) -> Vec<String> {
        match self.listening.get() {
            Some(started) => started.differences(&Listening::of(settings)),
            None => Vec::new(),
        }
    }

    /// Serves the next requests with `settings`' authentication, proxies and cap on sessions
    /// (the rest stays as it started: see [`Live::restart_needed`]).
    pub fn apply(&self, settings: Settings) {
        let (gate, _) = settings.split();
        *self.gate.write().expect("gate lock") = Some(Arc::new(gate));
    }
}

impl Listening {
    fn of(settings: &Settings) -> Self {
        Self {
            hosts: settings.hosts.clone(),
            origins: settings.origins.clone(),
            session_idle: settings.session_idle,
            tls: settings.tls.clone(),
            metrics_listener: settings.metrics_listener,
            drain: settings.drain.notice,
            drain_finish: settings.drain.finish,
        }
    }

    /// The names of the settings that differ between `self` and `other`.
    fn differences(&self, other: &Listening) -> Vec<String> {
        let mut changed: Vec<&str> = Vec::new();
        if self.hosts != other.hosts {
            changed.push("[http] hosts");
        }
        if self.origins != other.origins {
            changed.push("[http] origins");
        }
        if self.session_idle != other.session_idle {
            changed.push("[http] session_idle_seconds");
        }
        if self.tls != other.tls {
            changed.push("the TLS certificate or key file");
        }
        if self.metrics_listener != other.metrics_listener {
            changed.push("the metrics listener");
        }
        if self.drain != other.drain {
            changed.push("[http] drain_seconds");
        }
        if self.drain_finish != other.drain_finish {
            changed.push("[http] drain_finish_seconds");
        }
        changed.into_iter().map(String::from).collect()
    }
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
            max_sessions: DEFAULT_MAX_SESSIONS,
            session_idle: DEFAULT_SESSION_IDLE,
            tls: None,
            metrics_listener: None,
            live: Live::default(),
            drain: Drain::default(),
            beside: None,
            beside_on_metrics: false,
        }
    }
}

/// The cookie `name` a browser sent, if it sent one of a plausible size (at most 64 bytes: moat's
/// own are 43).
pub fn cookie(headers: &axum::http::HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(n, _)| *n == name)
        .map(|(_, value)| value.to_string())
        .filter(|value| !value.is_empty() && value.len() <= 64)
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
    let draining = settings.drain.clone();
    let (served, stop) = (catalogue.clone(), shutdown.clone());
    tokio::spawn(async move { draining.run(&served, stop).await });
    let tls = settings.tls.clone();
    let (metrics, hosts) = (settings.metrics_listener, settings.hosts.clone());
    let on_metrics = settings.beside_on_metrics && metrics.is_some();
    let (app, beside) = parts(catalogue.clone(), shutdown.clone(), settings);
    let (app, beside_metrics) = match on_metrics {
        true => (app, beside),
        false => (app.merge(beside.unwrap_or_default()), None),
    };
    if let Some(metrics_addr) = metrics {
        let listener = tokio::net::TcpListener::bind(metrics_addr)
            .await
            .with_context(|| format!("binding the metrics listener {metrics_addr}"))?;
        tracing::info!(
            "serving /metrics on http://{}/metrics",
            listener.local_addr()?
        );
        let app = scrape::listener(catalogue.clone(), hosts, beside_metrics)
            .into_make_service_with_connect_info::<SocketAddr>();
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
    let app = app.into_make_service_with_connect_info::<SocketAddr>();
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
    let (app, beside) = parts(catalogue, shutdown, settings);
    app.merge(beside.unwrap_or_default())
}

/// The router of [`router`], and apart what is served beside `/mcp`.
fn parts(
    catalogue: Catalogue,
    shutdown: CancellationToken,
    mut settings: Settings,
) -> (axum::Router, Option<axum::Router>) {
    let beside = settings.beside.take();
    let live = settings.live.clone();
    let drain = settings.drain.clone();
    let shared_sessions = catalogue.backends().sessions.clone();
    let (gate, listening) = settings.split();
    let mut config = StreamableHttpServerConfig::default();
    let loopback_origins = ["http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*"];
    config.allowed_origins = loopback_origins
        .into_iter()
        .map(String::from)
        .chain(listening.origins.iter().cloned())
        .collect();
    config.allowed_hosts.extend(listening.hosts.iter().cloned());
    config.max_request_body_bytes = MAX_REQUEST_BYTES;
    // A 2026-07-28 answer with nothing before it goes out as plain JSON; a call that reports
    // progress or logs streams as SSE. Legacy sessions always stream.
    config.json_response = true;
    config.cancellation_token = shutdown.clone();
    // Any replica restores a legacy session another opened, for its owner only.
    config.session_store = shared_sessions.clone().restorer();
    let mut manager = LocalSessionManager::default();
    manager.session_config.keep_alive = Some(listening.session_idle);
    let manager = Arc::new(manager);
    let served = catalogue.clone();
    // The handler rmcp makes for a request acts for its caller; its own lookups (the tool whose
    // `Mcp-Param` headers it checks) then see only what the caller may see.
    let service = StreamableHttpService::new(
        move || Ok(MoatServer::new(served.clone()).with_principal(auth::caller())),
        manager.clone(),
        config,
    );
    let separate_metrics = listening.metrics_listener.is_some();
    live.start(gate, listening);
    let sessions = Sessions::new(manager, shared_sessions);
    let limiter = Limiter {
        sessions: sessions.clone(),
        catalogue: catalogue.clone(),
        live: live.clone(),
        drain: drain.clone(),
    };
    let guard = Guard {
        live: live.clone(),
        catalogue: catalogue.clone(),
    };
    let mcp = axum::Router::new()
        .nest_service("/mcp", service)
        .layer(middleware::from_fn(forbidden::as_json))
        .layer(middleware::from_fn_with_state(
            limiter.clone(),
            quotas::limit_calls,
        ))
        .layer(middleware::from_fn(message::check_message))
        .layer(middleware::from_fn_with_state(limiter, quotas::limit_rate))
        .layer(middleware::from_fn_with_state(
            sessions,
            sessions::bind_to_principal,
        ));
    let beside = beside.map(|make| make(Direct { mcp: mcp.clone() }));
    let mut guarded = mcp;
    if !separate_metrics {
        guarded = guarded.route("/metrics", scrape::behind_auth(catalogue.clone()));
    }
    let guarded = guarded.layer(middleware::from_fn_with_state(guard, auth::authenticate));
    let consent = consent::routes(catalogue.clone(), live.clone());
    let metadata = get(move |uri: axum::http::Uri| {
        std::future::ready(auth::metadata(&live.gate(), uri.path()))
    });
    let app = axum::Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route(
            "/readyz",
            get(move || std::future::ready(readiness(&catalogue, [&drain.draining, &shutdown]))),
        )
        .route("/.well-known/oauth-protected-resource", metadata.clone())
        .route("/.well-known/oauth-protected-resource/{*path}", metadata)
        .merge(consent)
        .merge(guarded);
    (app, beside)
}

/// `/readyz`: 200 with the number of plugins and tools served while moat serves (it listens only
/// once its plugins are loaded), 503 once it is told to stop, so a load balancer stops sending
/// it requests before it stops answering them. `/healthz` only says the process answers.
fn readiness(catalogue: &Catalogue, stopping: [&CancellationToken; 2]) -> Response {
    if stopping.iter().any(|token| token.is_cancelled()) {
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
