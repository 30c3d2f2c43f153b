//! `GET /oauth/callback`: where a caller's browser comes back from consenting at an upstream's
//! authorization server (`[credentials.NAME] consent`). It needs no bearer token: the `state`
//! moat made for one principal is the proof, good once and for ten minutes, and the PKCE
//! verifier that makes the code worth anything never left moat.
//!
//! `moat serve --http` serves it with MCP. A stdio moat serves no HTTP, so it listens for the
//! callback alone on the loopback address of the source's `redirect_uri` (RFC 8252 §7.3, as a
//! native app does), from the first call that needs it until it stops ([`Loopback`]).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Mutex;

use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use crate::mcp::catalogue::Catalogue;

#[derive(Deserialize)]
pub struct Callback {
    state: Option<String>,
    code: Option<String>,
    error: Option<String>,
    error_description: Option<String>,
}

pub async fn callback(
    State(catalogue): State<Catalogue>,
    Query(query): Query<Callback>,
) -> Response {
    let Some(broker) = catalogue.credentials() else {
        return page(
            StatusCode::NOT_FOUND,
            "Nothing to connect",
            "This moat asks no consent.",
        );
    };
    if let Some(error) = &query.error {
        let why = query.error_description.as_deref().unwrap_or(error);
        return page(
            StatusCode::BAD_REQUEST,
            "Not connected",
            &format!("The authorization server said: {why}. Call the tool again to retry."),
        );
    }
    let (Some(state), Some(code)) = (&query.state, &query.code) else {
        return page(
            StatusCode::BAD_REQUEST,
            "Not connected",
            "This address lacks the `state` and `code` an authorization server sends back.",
        );
    };
    match broker.complete_consent(state, code).await {
        Ok((source, principal)) => {
            tracing::info!(source, principal, "a caller connected their account");
            page(
                StatusCode::OK,
                "Connected",
                &format!(
                    "Your account for \"{source}\" is connected. You can close this window and go \
                     back to your conversation."
                ),
            )
        }
        Err(why) => {
            tracing::warn!("a consent callback was refused: {why}");
            page(StatusCode::BAD_REQUEST, "Not connected", &format!("{why}."))
        }
    }
}

/// The loopback listeners of a stdio moat's callbacks, each bound once.
#[derive(Default)]
pub struct Loopback {
    bound: Mutex<HashMap<SocketAddr, Result<(), String>>>,
}

impl Loopback {
    /// Serves `catalogue`'s callback at `redirect_uri`, binding its address now unless it is
    /// bound already; or says why it cannot (not loopback, the port taken).
    pub fn serve(&self, catalogue: &Catalogue, redirect_uri: &str) -> Result<(), String> {
        let (address, path) = loopback_address(redirect_uri)?;
        let mut bound = self.bound.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(outcome) = bound.get(&address) {
            return outcome.clone();
        }
        let outcome = listen(address)
            .map(|listener| {
                let app = axum::Router::new()
                    .route(&path, axum::routing::get(callback))
                    .with_state(catalogue.clone());
                tracing::info!("listening on http://{address}{path} for consent callbacks");
                tokio::spawn(async move { axum::serve(listener, app).await });
            })
            .map_err(|e| format!("moat cannot listen on {address} for it: {e}"));
        bound.insert(address, outcome.clone());
        outcome
    }
}

fn listen(address: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let listener = std::net::TcpListener::bind(address)?;
    listener.set_nonblocking(true)?;
    tokio::net::TcpListener::from_std(listener)
}

/// The loopback address and path of `redirect_uri`: plain http to 127.0.0.1, [::1] or
/// localhost, as RFC 8252 has native apps take their redirects.
fn loopback_address(redirect_uri: &str) -> Result<(SocketAddr, String), String> {
    let not_loopback = || {
        format!(
            "its redirect_uri \"{redirect_uri}\" is not on this machine; a stdio moat takes the \
             browser back on a loopback address, such as http://127.0.0.1:8765/oauth/callback"
        )
    };
    let url = reqwest::Url::parse(redirect_uri).map_err(|_| not_loopback())?;
    let ip = match url.host_str() {
        Some("localhost") => IpAddr::V4(Ipv4Addr::LOCALHOST),
        Some(host) => host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
            .ok()
            .filter(IpAddr::is_loopback)
            .ok_or_else(not_loopback)?,
        None => return Err(not_loopback()),
    };
    let port = url.port_or_known_default().ok_or_else(not_loopback)?;
    if url.scheme() != "http" {
        return Err(not_loopback());
    }
    Ok((SocketAddr::new(ip, port), url.path().to_string()))
}

/// A small HTML page for the person in the browser.
fn page(status: StatusCode, title: &str, text: &str) -> Response {
    let escape = |s: &str| {
        s.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('"', "&quot;")
    };
    let body = format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>moat: {}</title></head>\
         <body><h1>{}</h1><p id=\"message\">{}</p></body></html>\n",
        escape(title),
        escape(title),
        escape(text)
    );
    (
        status,
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
            (header::REFERRER_POLICY, "no-referrer"),
        ],
        body,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stdio_callback_is_on_a_loopback_address() {
        let address = |uri: &str| loopback_address(uri).map(|(a, p)| format!("{a}{p}"));
        assert_eq!(
            address("http://127.0.0.1:8765/oauth/callback").unwrap(),
            "127.0.0.1:8765/oauth/callback"
        );
        assert_eq!(
            address("http://localhost/x/oauth/callback").unwrap(),
            "127.0.0.1:80/x/oauth/callback"
        );
        assert_eq!(
            address("http://[::1]:9/oauth/callback").unwrap(),
            "[::1]:9/oauth/callback"
        );
        for elsewhere in [
            "https://127.0.0.1:8765/oauth/callback",
            "http://tools.example.com/oauth/callback",
            "http://10.0.0.1:8765/oauth/callback",
        ] {
            assert!(
                address(elsewhere)
                    .unwrap_err()
                    .contains("not on this machine")
            );
        }
    }
}
