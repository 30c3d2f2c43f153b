//! The HTTP face in process: no byte of a request is read, and no JSON parsed, before its
//! credential is checked; a good credential reaches the MCP handler as its principal.

use std::sync::Arc;

use axum::body::{Body, to_bytes};
use axum::http::{Request, StatusCode, header};
use moat::access::authenticator::Authenticator;
use moat::access::credentials::{ApiKeys, digest};
use moat::mcp::catalogue::Catalogue;
use moat::mcp::http::auth::Authentication;
use moat::mcp::http::{MAX_REQUEST_BYTES, Settings, router};
use moat::plugin::registry::Registry;
use moat_tests::{engine, plugins, source};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

const TOKEN: &str = "moat_test_local_token_0123456789";

fn guarded() -> axum::Router {
    let (registry, errors) =
        Registry::load(engine(), &[source("echo", plugins::ECHO)]).expect("a linker");
    assert!(errors.is_empty());
    let keys = ApiKeys::new(vec![("ci".into(), digest("moat_test_api_key_abcdefghijk"))]);
    let authentication = Authentication::Required {
        authenticator: Authenticator::new(Some(TOKEN), keys, None),
        resource: None,
    };
    router(
        Catalogue::from(Arc::new(registry)),
        CancellationToken::new(),
        Settings::new(authentication),
    )
}

async fn post(router: &axum::Router, body: Vec<u8>, token: Option<&str>) -> (StatusCode, String) {
    let mut request = Request::post("/mcp")
        .header("host", "127.0.0.1")
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-06-18");
    if let Some(token) = token {
        request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let response = router
        .clone()
        .oneshot(request.body(Body::from(body)).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let body = to_bytes(response.into_body(), 1 << 20).await.unwrap();
    (status, String::from_utf8_lossy(&body).into_owned())
}

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;

#[tokio::test]
async fn nothing_is_read_before_the_credential_is_checked() {
    let router = guarded();
    // Bodies that would be refused as too large or not JSON are refused as unauthenticated
    // first: moat reads neither.
    let huge = vec![b'{'; MAX_REQUEST_BYTES + 1];
    assert_eq!(
        post(&router, huge.clone(), None).await.0,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        post(&router, b"{not json".to_vec(), None).await.0,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        post(&router, b"{not json".to_vec(), Some("moat_wrong"))
            .await
            .0,
        StatusCode::UNAUTHORIZED
    );
    // The same bodies with the token get the answers their bytes deserve.
    assert_eq!(
        post(&router, huge, Some(TOKEN)).await.0,
        StatusCode::PAYLOAD_TOO_LARGE
    );
    assert_eq!(
        post(&router, b"{not json".to_vec(), Some(TOKEN)).await.0,
        StatusCode::BAD_REQUEST
    );
}

#[tokio::test]
async fn the_local_token_and_an_api_key_are_let_in() {
    let router = guarded();
    for token in [TOKEN, "moat_test_api_key_abcdefghijk"] {
        let (status, body) = post(&router, INITIALIZE.into(), Some(token)).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert!(body.contains(r#""serverInfo":{"name":"moat""#), "{body}");
    }
}
