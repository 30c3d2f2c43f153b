//! `/healthz` and `/readyz` on moat's HTTP router, asked in process.

use std::sync::Arc;

use axum::body::{Body, to_bytes};
use axum::http::{Request, StatusCode};
use moat::mcp::catalogue::Catalogue;
use moat::mcp::http::auth::Authentication;
use moat::mcp::http::{Settings, router};
use moat::plugin::registry::Registry;
use moat_tests::{engine, plugins, source};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

async fn get(router: &axum::Router, path: &str) -> (StatusCode, String) {
    let request = Request::get(path)
        .header("host", "127.0.0.1")
        .body(Body::empty())
        .unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let body = to_bytes(response.into_body(), 1 << 16).await.unwrap();
    (status, String::from_utf8(body.to_vec()).unwrap())
}

#[tokio::test]
async fn ready_while_serving_and_not_once_shutting_down() {
    let sources = [source("echo", plugins::ECHO), source("time", plugins::TIME)];
    let (registry, errors) = Registry::load(engine(), &sources).expect("a linker");
    assert!(errors.is_empty());
    let tools = registry.tools().count();
    let shutdown = CancellationToken::new();
    let settings = Settings::new(Authentication::Off);
    let router = router(
        Catalogue::from(Arc::new(registry)),
        shutdown.clone(),
        settings,
    );

    assert_eq!(
        get(&router, "/healthz").await,
        (StatusCode::OK, "ok\n".into())
    );
    let (status, body) = get(&router, "/readyz").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let counts: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(counts, serde_json::json!({"plugins": 2, "tools": tools}));

    shutdown.cancel();
    let (status, body) = get(&router, "/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    // Alive all the same, until the process ends.
    assert_eq!(get(&router, "/healthz").await.0, StatusCode::OK);
}
