//! The operators' console: web pages that moat serves itself (`[console]`), for the people who
//! run it. They show what is served and to whom, the calls as they happen, the audit log,
//! consented credentials and the configuration, and let an operator call a tool, cancel a
//! call, revoke a credential and reload.
//!
//! A layer above `serve/` and `mcp/`: it reads what they hold, and nothing below knows it
//! exists. Each page is a file in [`pages`]; [`session`] signs operators in (with the OAuth
//! issuer callers use, or a one-time link from `moat console`) and checks each form's CSRF
//! token; [`layout`] is the frame every page shares and [`answer`] the answers that are no
//! page (a refusal, a redirect); every answer carries the headers that keep it to itself (a
//! strict CSP, no framing, nothing cached). Every asset is served from the binary.

mod answer;
mod form;
mod layout;
mod mask;
mod pages;
mod session;

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use crate::mcp::catalogue::Catalogue;
use crate::mcp::http::{Direct, Live};
use crate::mcp::live_calls::LiveCalls;
use crate::serve::reloads::Reloads;

use session::Sessions;

/// What every page reads; cloning shares it.
#[derive(Clone)]
pub struct Console {
    inner: Arc<Inner>,
}

struct Inner {
    catalogue: Catalogue,
    reloads: Reloads,
    /// The HTTP gate in force: who may sign in, and which proxies to believe.
    live: Live,
    /// `/mcp` as a principal: the calls operators make.
    direct: Direct,
    calls: Arc<LiveCalls>,
    sessions: Sessions,
    /// Whether browsers reach moat over https (its own TLS, or a proxy's).
    https: bool,
    /// The Redis replicas share state through, under `[cluster]`.
    cluster: Option<Arc<crate::cluster::Cluster>>,
}

/// Where a console is served from, and how browsers reach it.
pub struct Serving {
    pub catalogue: Catalogue,
    pub reloads: Reloads,
    pub live: Live,
    pub https: bool,
    pub cluster: Option<Arc<crate::cluster::Cluster>>,
}

impl Console {
    /// The console's routes, for `direct` calls to `/mcp`; calls are watched from now on.
    pub fn routes(serving: Serving, direct: Direct) -> Router {
        let console = Console {
            inner: Arc::new(Inner {
                calls: serving.catalogue.watch_calls(),
                catalogue: serving.catalogue,
                reloads: serving.reloads,
                live: serving.live,
                direct,
                sessions: Sessions::default(),
                https: serving.https,
                cluster: serving.cluster,
            }),
        };
        Router::new()
            .route("/console", get(|| async { answer::see_other("/console/") }))
            .route("/console/", get(pages::overview::page))
            .route("/console/plugins", get(pages::plugins::list))
            .route("/console/plugins/{name}", get(pages::plugins::page))
            .route(
                "/console/tools/{name}",
                get(pages::tool::page).post(pages::tool::call),
            )
            .route("/console/callers", get(pages::callers::page))
            .route("/console/live", get(pages::live::page))
            .route("/console/live/events", get(pages::live::events))
            .route("/console/live/cancel", post(pages::live::cancel))
            .route("/console/audit", get(pages::audit::page))
            .route("/console/credentials", get(pages::credentials::page))
            .route(
                "/console/credentials/revoke",
                post(pages::credentials::revoke),
            )
            .route("/console/config", get(pages::config::page))
            .route("/console/reload", post(pages::config::reload))
            .route("/console/sign-in", get(session::sign_in))
            .route("/console/signed-in", get(session::signed_in))
            .route("/console/sign-out", post(session::sign_out))
            .route("/console/link", post(session::link))
            .route("/console/enter/{token}", get(session::enter))
            .route("/console/assets/{name}", get(layout::asset))
            .layer(middleware::from_fn(protect))
            .with_state(console)
    }

    fn catalogue(&self) -> &Catalogue {
        &self.inner.catalogue
    }
}

/// The Content Security Policy of every console response: nothing but moat's own scripts,
/// styles and images, no inline code, no framing, forms only to moat.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                   connect-src 'self'; form-action 'self'; frame-ancestors 'none'; \
                   base-uri 'none'";

/// Adds the headers that keep every console response to moat's own origin and out of caches.
async fn protect(request: axum::extract::Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    let fixed = [
        (header::CONTENT_SECURITY_POLICY, CSP),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "no-referrer"),
    ];
    for (name, value) in fixed {
        headers.insert(name, HeaderValue::from_static(value));
    }
    if !headers.contains_key(header::CACHE_CONTROL) {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

/// The state handlers take.
type Shared = State<Console>;

/// A page's answer.
type Page = Result<Response, answer::Refusal>;

fn html(markup: maud::Markup) -> Response {
    markup.into_response()
}

/// Where the console of `settings` is served for a moat serving HTTP on `addr`: beside `/mcp`
/// (the returned [`crate::mcp::http::Beside`]), on the metrics listener when `address` is its
/// (see [`on_metrics`]), or on its own listener, which this binds. A console is refused on an
/// address off loopback unless browsers reach it over TLS, moat's or a trusted proxy's.
pub async fn serve(
    settings: &crate::serve::config::ConsoleSettings,
    addr: std::net::SocketAddr,
    http: &crate::mcp::http::Settings,
    serving: Serving,
) -> anyhow::Result<crate::mcp::http::Beside> {
    let at = settings.address.unwrap_or(addr);
    let proxied = !http.trusted_proxies.is_empty();
    // Its own listener, and the metrics listener, are plain HTTP: TLS there is a proxy's.
    let encrypted = match settings.address {
        Some(_) => proxied,
        None => http.tls.is_some() || proxied,
    };
    let shared = on_metrics(settings, http);
    if !at.ip().is_loopback() && !encrypted {
        anyhow::bail!(
            "[console] would be served on {at}, off loopback, in plain HTTP: give [http] \
             tls_cert and tls_key (beside /mcp), or put a TLS proxy in front and name it in \
             [http] trusted_proxies"
        );
    }
    let Some(own) = settings.address.filter(|_| !shared) else {
        match shared {
            true => tracing::info!("serving the console at /console/ on the metrics listener"),
            false => tracing::info!("serving the console at /console/ beside /mcp"),
        }
        return Ok(Box::new(move |direct| Console::routes(serving, direct)));
    };
    let listener = tokio::net::TcpListener::bind(own)
        .await
        .map_err(|e| anyhow::anyhow!("binding the console's address {own}: {e}"))?;
    tracing::info!(
        "serving the console on http://{}/console/",
        listener.local_addr()?
    );
    Ok(Box::new(move |direct| {
        let app = Console::routes(serving, direct)
            .into_make_service_with_connect_info::<std::net::SocketAddr>();
        tokio::spawn(async move {
            if let Err(error) = axum::serve(listener, app).await {
                tracing::error!("the console's listener stopped: {error}");
            }
        });
        Router::new()
    }))
}

/// Whether the console goes on the metrics listener: its `address` is that listener's.
pub fn on_metrics(
    settings: &crate::serve::config::ConsoleSettings,
    http: &crate::mcp::http::Settings,
) -> bool {
    settings.address.is_some() && settings.address == http.metrics_listener
}
