//! A stdio moat's consent callback. A stdio moat serves no HTTP, so it listens for the callback
//! alone on the loopback address of the source's `redirect_uri` (RFC 8252 §7.3, as a native app
//! does), from the first call that needs it until it stops. Its browser is on the caller's own
//! machine, so its links go straight to the third party ([`Proof::Loopback`]).
//!
//! [`Proof::Loopback`]: crate::upstream::consent::Proof::Loopback

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Mutex;

use crate::mcp::catalogue::Catalogue;

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
        // Every source's callback under the same prefix, whichever source bound it first.
        let prefix = path.rfind("/oauth/callback/").map_or("", |at| &path[..at]);
        let route = format!("{prefix}/oauth/callback/{{source}}");
        let outcome = listen(address)
            .map(|listener| {
                let app = axum::Router::new()
                    .route(&route, axum::routing::get(super::callback))
                    .with_state(super::Pages::stdio(catalogue.clone()));
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
             browser back on a loopback address, such as http://127.0.0.1:8765/oauth/callback/NAME"
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stdio_callback_is_on_a_loopback_address() {
        let address = |uri: &str| loopback_address(uri).map(|(a, p)| format!("{a}{p}"));
        assert_eq!(
            address("http://127.0.0.1:8765/oauth/callback/tracker").unwrap(),
            "127.0.0.1:8765/oauth/callback/tracker"
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
