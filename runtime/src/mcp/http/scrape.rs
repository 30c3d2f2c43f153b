//! `/metrics` (Prometheus): the calls of every plugin and tool, by name. On the main port it
//! is behind authentication and answers only a caller who may see every tool, prompt and
//! resource served, since its series name them all; a caller to whom `[[access]]` hides some
//! gets 403. On a listener of its own (`[http] metrics`) it needs no credential, so it is for an
//! address only the scraper reaches, and accepts only the `Host` names `/mcp` does (a web page
//! the operator visits cannot read it through DNS rebinding).

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get};

use crate::access::Principal;
use crate::mcp::catalogue::Catalogue;
use crate::mcp::metrics;

/// `/metrics` beside `/mcp`, for an authenticated caller who sees everything.
pub fn behind_auth(catalogue: Catalogue) -> MethodRouter {
    get(move |request: Request| {
        let catalogue = catalogue.clone();
        async move {
            let principal = request.extensions().get::<Principal>();
            let registry = catalogue.current();
            match principal {
                Some(principal) if catalogue.sees_all(&registry, principal) => render(&catalogue),
                _ => (
                    StatusCode::FORBIDDEN,
                    "the metrics name every plugin and tool; they are for callers who may see \
                     them all\n",
                )
                    .into_response(),
            }
        }
    })
}

/// The app of the separate metrics listener: `/metrics`, and `beside` it what is served there
/// (the console, when moat.toml puts it on this address), for loopback `Host` names and `hosts`.
pub fn listener(
    catalogue: Catalogue,
    hosts: Vec<String>,
    beside: Option<axum::Router>,
) -> axum::Router {
    axum::Router::new()
        .route(
            "/metrics",
            get(move || std::future::ready(render(&catalogue))),
        )
        .merge(beside.unwrap_or_default())
        .layer(middleware::from_fn_with_state(hosts, check_host))
}

fn render(catalogue: &Catalogue) -> Response {
    let text = catalogue.metrics().render(&catalogue.current());
    ([(header::CONTENT_TYPE, metrics::CONTENT_TYPE)], text).into_response()
}

async fn check_host(State(hosts): State<Vec<String>>, request: Request, next: Next) -> Response {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if !host_allowed(host, &hosts) {
        return (
            StatusCode::FORBIDDEN,
            "Forbidden: Host header is not allowed\n",
        )
            .into_response();
    }
    next.run(request).await
}

/// Whether `host` (a `Host` header: a name or address, and perhaps a port) is a loopback name
/// or one of `allowed` (each a name, or `name:port`).
fn host_allowed(host: &str, allowed: &[String]) -> bool {
    let Ok(authority) = host.parse::<axum::http::uri::Authority>() else {
        return false;
    };
    let name = authority
        .host()
        .trim_matches(['[', ']'])
        .to_ascii_lowercase();
    if ["localhost", "127.0.0.1", "::1"].contains(&name.as_str()) {
        return true;
    }
    allowed.iter().any(|allowed| {
        let Ok(allowed) = allowed.trim().parse::<axum::http::uri::Authority>() else {
            return false;
        };
        allowed
            .host()
            .trim_matches(['[', ']'])
            .eq_ignore_ascii_case(&name)
            && allowed
                .port_u16()
                .is_none_or(|port| authority.port_u16() == Some(port))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_and_listed_hosts_are_allowed() {
        let listed = vec![
            "metrics.example.com".to_string(),
            "tools.example.com:9100".into(),
        ];
        for host in [
            "localhost:9100",
            "127.0.0.1:9100",
            "[::1]:9100",
            "LOCALHOST",
        ] {
            assert!(host_allowed(host, &listed), "{host}");
        }
        assert!(host_allowed("metrics.example.com:9100", &listed));
        assert!(host_allowed("tools.example.com:9100", &listed));
        for host in [
            "evil.example.com",
            "tools.example.com:80",
            "",
            "127.0.0.1.evil.com",
        ] {
            assert!(!host_allowed(host, &listed), "{host}");
        }
    }
}
