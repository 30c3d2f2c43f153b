//! Who is calling `/mcp`: the bearer credential checked before anything else reads the request,
//! the [`Principal`] left in its extensions for the MCP handler, and what a refused client is
//! told: 401 with `WWW-Authenticate` naming the Protected Resource Metadata (RFC 9728) and the
//! scopes, 403 `insufficient_scope`, 503 while the authorization server cannot be asked. The
//! metadata itself is served at `/.well-known/oauth-protected-resource` (and under the resource's
//! path, as RFC 9728 places it).

use std::net::{IpAddr, SocketAddr};

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::access::authenticator::{Authenticator, Refusal, bearer_token};
use crate::access::{AccessToken, Principal, Via};
use crate::mcp::catalogue::Catalogue;
use crate::mcp::http::{Gate, Live};

/// What `/mcp` requires.
pub enum Authentication {
    /// Nothing: `--no-auth`, loopback only.
    Off,
    /// A bearer credential the authenticator accepts.
    Required {
        authenticator: Authenticator,
        /// Set when OAuth is configured: what the metadata document says.
        resource: Option<ProtectedResource>,
    },
}

impl Authentication {
    /// The OAuth issuer's checker, when OAuth callers are accepted.
    pub fn oauth(&self) -> Option<&crate::access::oauth::OAuth> {
        match self {
            Self::Required { authenticator, .. } => authenticator.oauth(),
            Self::Off => None,
        }
    }
}

/// This server as an OAuth protected resource.
#[derive(Clone, Debug)]
pub struct ProtectedResource {
    /// Its identifier, the `/mcp` URL tokens name in `aud`.
    pub resource: String,
    pub authorization_servers: Vec<String>,
    pub scopes: Vec<String>,
}

impl ProtectedResource {
    /// Where the metadata lives: the well-known part inserted before the resource's path.
    pub fn metadata_url(&self) -> String {
        let (origin, path) = split_origin(&self.resource);
        format!("{origin}/.well-known/oauth-protected-resource{path}")
    }

    /// The metadata path under this server, as served.
    pub fn metadata_path(&self) -> String {
        let (_, path) = split_origin(&self.resource);
        format!("/.well-known/oauth-protected-resource{path}")
    }

    pub fn document(&self) -> serde_json::Value {
        json!({
            "resource": self.resource,
            "authorization_servers": self.authorization_servers,
            "scopes_supported": self.scopes,
            "bearer_methods_supported": ["header"],
            "resource_name": "moat",
        })
    }
}

fn split_origin(url: &str) -> (&str, &str) {
    let url = url.trim_end_matches('/');
    let start = url.find("://").map_or(0, |i| i + 3);
    match url[start..].find('/') {
        Some(slash) => url.split_at(start + slash),
        None => (url, ""),
    }
}

/// The caller's address: the peer's, or when the peer is a trusted proxy, the last address in
/// `X-Forwarded-For` that no trusted proxy added.
#[derive(Clone, Copy, Debug)]
pub struct Remote(pub Option<IpAddr>);

/// The state the layer needs.
#[derive(Clone)]
pub struct Guard {
    /// The authentication and proxies in force now.
    pub live: Live,
    pub catalogue: Catalogue,
}

tokio::task_local! {
    /// Whom the request being handled on this task acts for.
    static CALLER: Principal;
}

/// Runs `handling` acting for `principal`, as a request this layer authenticated would.
pub(super) async fn acting_for<F: Future>(principal: Principal, handling: F) -> F::Output {
    CALLER.scope(principal, handling).await
}

/// Whom the request being handled acts for, as this layer established it: for what rmcp asks
/// of a handler outside any request's context. Anonymous outside a request.
pub fn caller() -> Principal {
    CALLER
        .try_with(Principal::clone)
        .unwrap_or_else(|_| Principal::anonymous())
}

/// The Protected Resource Metadata (RFC 9728) at `path`, if OAuth is configured and `path` is
/// where it lives: at the well-known path, and under the resource's own path.
pub fn metadata(gate: &Gate, path: &str) -> Response {
    let Authentication::Required {
        resource: Some(resource),
        ..
    } = &gate.authentication
    else {
        return StatusCode::NOT_FOUND.into_response();
    };
    if path != "/.well-known/oauth-protected-resource" && path != resource.metadata_path() {
        return StatusCode::NOT_FOUND.into_response();
    }
    (
        [(header::CONTENT_TYPE, "application/json")],
        resource.document().to_string(),
    )
        .into_response()
}

/// The address a request came from: its peer's, or the one a trusted proxy says it forwards.
pub(super) fn remote(request: &Request, trusted: &[ipnet::IpNet]) -> Option<IpAddr> {
    let trusted = |ip: &IpAddr| trusted.iter().any(|range| range.contains(ip));
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|info| info.0.ip())?;
    if !trusted(&peer) {
        return Some(peer);
    }
    let forwarded: Vec<IpAddr> = request
        .headers()
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|a| a.trim().parse().ok())
        .collect();
    forwarded
        .into_iter()
        .rev()
        .find(|ip| !trusted(ip))
        .or(Some(peer))
}

/// Authenticates the request, or answers it with the refusal.
pub async fn authenticate(
    State(guard): State<Guard>,
    mut request: Request,
    next: Next,
) -> Response {
    // The gate as it is when the request comes: a reload changes it for the next one.
    let gate = guard.live.gate();
    let address = remote(&request, &gate.trusted_proxies);
    request.extensions_mut().insert(Remote(address));
    let (authenticator, resource) = match &gate.authentication {
        Authentication::Off => {
            let principal = Principal::anonymous();
            request.extensions_mut().insert(principal.clone());
            return CALLER.scope(principal, next.run(request)).await;
        }
        Authentication::Required {
            authenticator,
            resource,
        } => (authenticator, resource.as_ref()),
    };
    let credential = request
        .headers()
        .get(header::AUTHORIZATION)
        .map(HeaderValue::as_bytes);
    match authenticator.authenticate(credential).await {
        Ok(principal) => {
            // An OAuth caller's token stays with its request, for the exchanges of
            // `[credentials]` made on its behalf.
            if matches!(principal.via, Via::Jwt | Via::Introspection)
                && let Some(token) = credential.and_then(|c| bearer_token(c).ok())
            {
                let token = AccessToken::new(token);
                request.extensions_mut().insert(token);
            }
            request.extensions_mut().insert(principal.clone());
            CALLER.scope(principal, next.run(request)).await
        }
        Err(refusal) => {
            guard
                .catalogue
                .metrics()
                .record_auth_failure(refusal.kind());
            let from = address.map_or("an unknown address".into(), |a| a.to_string());
            match &refusal {
                Refusal::Missing => tracing::debug!("refused a request from {from}: no credential"),
                // What it should have sent: a host still sending the local token after [auth]
                // named API keys is the usual case.
                Refusal::Invalid(_) => tracing::warn!(
                    "refused a request from {from}: {}; this moat accepts {}",
                    describe(&refusal),
                    authenticator.accepted()
                ),
                other => tracing::warn!("refused a request from {from}: {}", describe(other)),
            }
            refuse(&refusal, resource)
        }
    }
}

fn describe(refusal: &Refusal) -> String {
    match refusal {
        Refusal::Missing => "this server requires `Authorization: Bearer TOKEN`".into(),
        Refusal::Invalid(why) => why.clone(),
        Refusal::InsufficientScope(scopes) => {
            format!("the token lacks the scope {}", scopes.join(" "))
        }
        Refusal::Unavailable(why) => format!("the token cannot be checked now: {why}"),
    }
}

/// The answer to a refused request.
pub fn refuse(refusal: &Refusal, resource: Option<&ProtectedResource>) -> Response {
    let description = describe(refusal);
    let (status, error) = match refusal {
        Refusal::Missing => (StatusCode::UNAUTHORIZED, None),
        Refusal::Invalid(_) => (StatusCode::UNAUTHORIZED, Some("invalid_token")),
        Refusal::InsufficientScope(_) => (StatusCode::FORBIDDEN, Some("insufficient_scope")),
        // Not the client's fault: it should retry, not fetch another token.
        Refusal::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, None),
    };
    let mut challenge = vec!["realm=\"moat\"".to_string()];
    if let Some(resource) = resource {
        challenge.push(format!("resource_metadata=\"{}\"", resource.metadata_url()));
        let scopes = match refusal {
            Refusal::InsufficientScope(missing) => missing.clone(),
            _ => resource.scopes.clone(),
        };
        if !scopes.is_empty() {
            challenge.push(format!("scope=\"{}\"", scopes.join(" ")));
        }
    }
    if let Some(error) = error {
        challenge.push(format!("error=\"{error}\""));
        challenge.push(format!("error_description=\"{}\"", quoted(&description)));
    }
    let mut headers = HeaderMap::new();
    if let Ok(value) = HeaderValue::try_from(format!("Bearer {}", challenge.join(", "))) {
        headers.insert(header::WWW_AUTHENTICATE, value);
    }
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if status == StatusCode::SERVICE_UNAVAILABLE {
        headers.insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
    }
    let body = json!({
        "error": error.unwrap_or(if status == StatusCode::SERVICE_UNAVAILABLE {
            "temporarily_unavailable"
        } else {
            "unauthorized"
        }),
        "error_description": description,
    });
    (status, headers, body.to_string()).into_response()
}

/// A description fit for a quoted-string: no quotes or backslashes, printable ASCII only.
fn quoted(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '"' | '\\' => '\'',
            c if c.is_ascii_graphic() || c == ' ' => c,
            _ => '?',
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request_from(peer: &str, forwarded: &[&str]) -> Request {
        let mut request = Request::new(axum::body::Body::empty());
        request
            .extensions_mut()
            .insert(ConnectInfo(peer.parse::<SocketAddr>().unwrap()));
        for value in forwarded {
            request
                .headers_mut()
                .append("x-forwarded-for", HeaderValue::from_str(value).unwrap());
        }
        request
    }

    #[test]
    fn forwarded_addresses_count_only_from_trusted_proxies() {
        let proxy: ipnet::IpNet = "10.0.0.1/32".parse().unwrap();
        let ip = |text: &str| Some(text.parse::<IpAddr>().unwrap());
        // From anyone else the header is the caller's to forge, and ignored.
        let direct = request_from("192.0.2.7:5000", &["203.0.113.9"]);
        assert_eq!(remote(&direct, &[proxy]), ip("192.0.2.7"));
        // From the proxy: the rightmost address it did not add itself; what the caller put
        // before it is the caller's claim.
        let proxied = request_from("10.0.0.1:5000", &["1.2.3.4, 203.0.113.9"]);
        assert_eq!(remote(&proxied, &[proxy]), ip("203.0.113.9"));
        let chained = request_from("10.0.0.1:5000", &["203.0.113.9", "10.0.0.1"]);
        assert_eq!(remote(&chained, &[proxy]), ip("203.0.113.9"));
        // A proxy that names nobody: the proxy.
        assert_eq!(
            remote(&request_from("10.0.0.1:5000", &[]), &[proxy]),
            ip("10.0.0.1")
        );
        // A range: every proxy in it, and the rightmost address outside it is the caller.
        let pods: ipnet::IpNet = "10.0.0.0/8".parse().unwrap();
        let through_two = request_from("10.0.0.2:5000", &["203.0.113.9, 10.1.2.3"]);
        assert_eq!(remote(&through_two, &[pods]), ip("203.0.113.9"));
        assert_eq!(remote(&through_two, &[proxy]), ip("10.0.0.2"));
    }

    #[test]
    fn the_metadata_lives_under_the_resources_path() {
        let resource = ProtectedResource {
            resource: "https://tools.example.com/mcp".into(),
            authorization_servers: vec!["https://id.example.com".into()],
            scopes: vec!["tools".into()],
        };
        assert_eq!(
            resource.metadata_url(),
            "https://tools.example.com/.well-known/oauth-protected-resource/mcp"
        );
        assert_eq!(
            resource.metadata_path(),
            "/.well-known/oauth-protected-resource/mcp"
        );
    }

    #[test]
    fn a_refusal_says_where_the_metadata_is_and_never_breaks_the_header() {
        let resource = ProtectedResource {
            resource: "http://127.0.0.1:9/mcp".into(),
            authorization_servers: vec![],
            scopes: vec!["tools".into()],
        };
        let response = refuse(&Refusal::Invalid("bad \"quote\"\n".into()), Some(&resource));
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        let challenge = response.headers()[header::WWW_AUTHENTICATE]
            .to_str()
            .unwrap();
        assert_eq!(
            challenge,
            "Bearer realm=\"moat\", resource_metadata=\"http://127.0.0.1:9/.well-known/oauth-protected-resource/mcp\", \
             scope=\"tools\", error=\"invalid_token\", error_description=\"bad 'quote'?\""
        );
        let forbidden = refuse(
            &Refusal::InsufficientScope(vec!["admin".into()]),
            Some(&resource),
        );
        assert_eq!(forbidden.status(), StatusCode::FORBIDDEN);
        let challenge = forbidden.headers()[header::WWW_AUTHENTICATE]
            .to_str()
            .unwrap();
        assert!(challenge.contains("scope=\"admin\", error=\"insufficient_scope\""));
    }
}
