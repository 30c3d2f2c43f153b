//! The HTTP endpoint: an arbitrary request (method, path, headers, body) through moat's router,
//! in process.
//!
//! Input: a request written as on the wire, `METHOD PATH` on the first line, `Name: value`
//! header lines, an empty line, then the body. Checks that the router neither panics nor hangs,
//! and that a client's bytes never make it fail as a server (5xx).

use std::time::Duration;

use super::{CATALOGUE, RUNTIME};
use axum::body::Body;
use axum::http::{Method, Request};
use http_body_util::BodyExt;
use moat::access::authenticator::Authenticator;
use moat::access::credentials::ApiKeys;
use moat::mcp::http::auth::Authentication;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// The local token the router takes.
const TOKEN: &str = "moat_fuzz_token_0123456789abcdef";

/// Runs one input; panics on a finding.
pub fn check(data: &[u8]) {
    let Some(request) = request(data) else {
        return;
    };
    RUNTIME.block_on(async {
        let shutdown = CancellationToken::new();
        // Authentication as `moat serve --http` has it by default: the local token (the
        // `-authorized` seeds carry it, the others meet the 401).
        let authentication = Authentication::Required {
            authenticator: Authenticator::new(Some(TOKEN), ApiKeys::default(), None),
            resource: None,
        };
        let settings = moat::mcp::http::Settings::new(authentication);
        let router = moat::mcp::http::router(CATALOGUE.clone(), shutdown.clone(), settings);
        let response = tokio::time::timeout(Duration::from_secs(10), router.oneshot(request))
            .await
            .expect("no response within 10 s")
            .unwrap();
        let status = response.status();
        assert!(!status.is_server_error(), "{status}");
        // An event stream stays open for later messages: read what comes at once, then hang up.
        let mut body = response.into_body();
        let deadline = tokio::time::sleep(Duration::from_millis(200));
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                frame = body.frame() => match frame {
                    Some(Ok(_)) => {}
                    Some(Err(_)) | None => break,
                },
                () = &mut deadline => break,
            }
        }
        // Ends the sessions this request opened.
        shutdown.cancel();
    });
}

/// Reads the request out of the input; `None` when the first line or a header is not valid.
fn request(data: &[u8]) -> Option<Request<Body>> {
    let split = data.windows(2).position(|w| w == b"\n\n");
    let (head, body) = match split {
        Some(at) => (&data[..at], &data[at + 2..]),
        None => (data, &[][..]),
    };
    let head = std::str::from_utf8(head).ok()?;
    let mut lines = head.lines();
    let (method, path) = lines.next()?.split_once(' ')?;
    let mut builder = Request::builder()
        .method(Method::from_bytes(method.as_bytes()).ok()?)
        .uri(path);
    for line in lines {
        let (name, value) = line.split_once(':')?;
        builder = builder.header(name.trim(), value.trim());
    }
    builder.body(Body::from(body.to_vec())).ok()
}
