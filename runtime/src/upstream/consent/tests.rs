//! Consented tokens kept, refreshed once however many calls find them stale at once, dropped
//! only when the grant is refused, against a token endpoint that counts what it received.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::*;
use crate::shared::consents::Store;
use crate::shared::consents::{Fallback, File, Keeping, Memory, promises};

fn settings(token_endpoint: &str) -> Settings {
    Settings {
        authorization_endpoint: "https://id.example/auth".into(),
        token_endpoint: token_endpoint.into(),
        client_id: "moat".into(),
        client_secret: None,
        scope: Some("read".into()),
        resource: None,
        redirect_uri: "https://moat.example/oauth/callback/tracker".into(),
        issuer: None,
        confirm_unproven: false,
    }
}

fn tokened(access: &str, refresh: Option<&str>, expires_in: Option<u64>) -> Tokened {
    Tokened {
        access_token: access.into(),
        refresh_token: refresh.map(Into::into),
        expires_in,
    }
}

fn http() -> reqwest::Client {
    crate::supply::source::install_tls_provider();
    reqwest::Client::new()
}

/// How the refresh endpoint answers.
#[derive(Clone, Copy, PartialEq)]
enum Mood {
    /// Rotates: each refresh token is good once; one used again revokes the grant.
    Rotating,
    /// Answers 503.
    Down,
}

/// A slow refresh endpoint that rotates refresh tokens and counts what it received.
struct Endpoint {
    url: String,
    received: Arc<AtomicUsize>,
    reused: Arc<AtomicUsize>,
}

async fn endpoint(mood: Mood, delay: Duration) -> Endpoint {
    let received = Arc::new(AtomicUsize::new(0));
    let reused = Arc::new(AtomicUsize::new(0));
    let used: Arc<Mutex<HashSet<String>>> = Arc::default();
    let (counted, counted_reuse) = (received.clone(), reused.clone());
    let answer = move |axum::Form(form): axum::Form<std::collections::HashMap<String, String>>| {
        let (received, reused, used) = (received.clone(), reused.clone(), used.clone());
        async move {
            let n = received.fetch_add(1, Ordering::SeqCst) + 1;
            tokio::time::sleep(delay).await;
            let json = [(axum::http::header::CONTENT_TYPE, "application/json")];
            if mood == Mood::Down {
                return (
                    axum::http::StatusCode::SERVICE_UNAVAILABLE,
                    json,
                    "{}".to_string(),
                );
            }
            let refresh = form.get("refresh_token").cloned().unwrap_or_default();
            if !used.lock().unwrap().insert(refresh) {
                reused.fetch_add(1, Ordering::SeqCst);
                let body = r#"{"error": "invalid_grant", "error_description": "reused"}"#;
                return (axum::http::StatusCode::BAD_REQUEST, json, body.to_string());
            }
            let body = format!(
                r#"{{"access_token": "access-{n}", "refresh_token": "refresh-{n}", "expires_in": 3600}}"#
            );
            (axum::http::StatusCode::OK, json, body)
        }
    };
    let app = axum::Router::new().route("/token", axum::routing::post(answer));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/token", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    Endpoint {
        url,
        received: counted,
        reused: counted_reuse,
    }
}

/// Alice's tokens, due for a refresh with `refresh-0`.
async fn keep_stale(consents: &Consents) {
    let stale = tokened("old", Some("refresh-0"), Some(0));
    consents.keep("tracker", "alice", stale).await;
}

/// Eight calls at once find alice's token stale: one refresh reaches the endpoint, and every
/// call gets what it gave.
async fn stale_token_is_refreshed_once(consents: Arc<Consents>) {
    let endpoint = endpoint(Mood::Rotating, Duration::from_millis(400)).await;
    let settings = settings(&endpoint.url);
    keep_stale(&consents).await;
    let http = http();
    let calls = (0..8).map(|_| {
        let (consents, http, settings) = (consents.clone(), http.clone(), settings.clone());
        tokio::spawn(async move { consents.token(&http, "tracker", "alice", &settings).await })
    });
    let tokens: Vec<_> = futures_util::future::join_all(calls)
        .await
        .into_iter()
        .map(|joined| joined.unwrap())
        .collect();
    assert!(
        tokens
            .iter()
            .all(|t| t == &Ok(Some("access-1".to_string()))),
        "{tokens:?}"
    );
    assert_eq!(endpoint.received.load(Ordering::SeqCst), 1);
    assert_eq!(endpoint.reused.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn calls_at_once_refresh_once_in_memory() {
    stale_token_is_refreshed_once(Arc::new(Consents::default())).await;
}

#[tokio::test]
async fn calls_at_once_refresh_once_with_a_file() {
    let dir = std::env::temp_dir().join(format!("moat-consent-refresh-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let store = Store::new(&dir.join("c.sealed"), &"k".repeat(32)).unwrap();
    let keeping: Box<dyn Keeping> = Box::new(File::open(store).unwrap());
    stale_token_is_refreshed_once(Arc::new(Consents::new(keeping))).await;
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn calls_at_once_refresh_once_when_the_shared_store_is_down() {
    // Redis unreachable: the replica's own copy takes the turns.
    let keeping: Box<dyn Keeping> = Box::new(Fallback::new(Box::new(Unreachable)));
    stale_token_is_refreshed_once(Arc::new(Consents::new(keeping))).await;
}

#[tokio::test]
async fn a_refresh_that_fails_keeps_the_tokens_and_only_a_refused_grant_drops_them() {
    let consents = Consents::default();
    let http = http();
    let down = endpoint(Mood::Down, Duration::ZERO).await;
    keep_stale(&consents).await;
    let why = consents
        .token(&http, "tracker", "alice", &settings(&down.url))
        .await
        .unwrap_err();
    assert!(why.contains("the next call tries again"), "{why}");
    // Kept: the next call, with the endpoint back, refreshes with the same refresh token.
    let up = endpoint(Mood::Rotating, Duration::ZERO).await;
    let token = consents
        .token(&http, "tracker", "alice", &settings(&up.url))
        .await;
    assert_eq!(token, Ok(Some("access-1".into())));
    // refresh-0 again (a server that saw it used): invalid_grant drops the tokens.
    keep_stale(&consents).await;
    let token = consents
        .token(&http, "tracker", "alice", &settings(&up.url))
        .await;
    assert_eq!(token, Ok(None));
    assert_eq!(consents.held("tracker", "alice").await, Ok(None));
}

#[tokio::test]
async fn a_token_the_upstream_refused_is_refreshed_before_the_caller_is_asked() {
    let consents = Consents::default();
    let http = http();
    let up = endpoint(Mood::Rotating, Duration::ZERO).await;
    let settings = settings(&up.url);
    consents
        .keep(
            "tracker",
            "alice",
            tokened("a0", Some("refresh-0"), Some(3600)),
        )
        .await;
    // A refusal of a token alice no longer holds changes nothing.
    consents.refused("tracker", "alice", "older").await;
    let token = consents.token(&http, "tracker", "alice", &settings).await;
    assert_eq!(token, Ok(Some("a0".into())));
    consents.refused("tracker", "alice", "a0").await;
    let token = consents.token(&http, "tracker", "alice", &settings).await;
    assert_eq!(token, Ok(Some("access-1".into())));
    // Without a refresh token, a refused one is dropped: the caller is asked.
    consents
        .keep("tracker", "bob", tokened("b0", None, Some(3600)))
        .await;
    consents.refused("tracker", "bob", "b0").await;
    assert_eq!(
        consents.token(&http, "tracker", "bob", &settings).await,
        Ok(None)
    );
}

#[tokio::test]
async fn tokens_are_kept_per_source_and_principal_with_lifetimes_capped() {
    let consents = Consents::default();
    let http = http();
    let settings = settings("http://127.0.0.1:9/token");
    consents
        .keep("tracker", "alice", tokened("a", None, Some(3600)))
        .await;
    consents
        .keep("tracker", "bob", tokened("b", None, Some(3600)))
        .await;
    let token = |p: &'static str| consents.token(&http, "tracker", p, &settings);
    assert_eq!(token("alice").await, Ok(Some("a".into())));
    assert_eq!(token("bob").await, Ok(Some("b".into())));
    assert_eq!(token("carol").await, Ok(None));
    consents.forget("tracker", "alice").await;
    assert_eq!(token("alice").await, Ok(None));
    // Expired without a refresh token: gone, the caller is asked again.
    consents
        .keep("tracker", "bob", tokened("b2", None, Some(1)))
        .await;
    assert_eq!(token("bob").await, Ok(None));
    // A lifetime near 2^64 seconds is capped, not an overflow.
    consents
        .keep("tracker", "carol", tokened("long", None, Some(u64::MAX)))
        .await;
    assert_eq!(token("carol").await, Ok(Some("long".into())));
}

/// A shared store that is never there.
struct Unreachable;

#[async_trait::async_trait]
impl Keeping for Unreachable {
    async fn tokens(&self, _: &str, _: &str) -> Result<Option<Entry>, KeepError> {
        Err(down())
    }
    async fn keep(&self, _: &Entry) -> Result<(), KeepError> {
        Err(down())
    }
    async fn forget(&self, _: &str, _: &str) -> Result<bool, KeepError> {
        Err(down())
    }
    async fn all(&self) -> Result<Vec<Entry>, KeepError> {
        Err(down())
    }
    async fn take_turn(&self, _: &str, _: &str, _: &str, _: Duration) -> Result<bool, KeepError> {
        Err(down())
    }
    async fn end_turn(&self, _: &str, _: &str, _: &str) -> Result<(), KeepError> {
        Err(down())
    }
    async fn put_step(&self, _: &str, _: &[u8], _: Duration) -> Result<(), KeepError> {
        Err(down())
    }
    async fn take_step(&self, _: &str) -> Result<Option<Vec<u8>>, KeepError> {
        Err(down())
    }
    async fn peek_step(&self, _: &str) -> Result<Option<Vec<u8>>, KeepError> {
        Err(down())
    }
}

fn down() -> KeepError {
    KeepError::Unreachable("Redis cannot be reached".into())
}

#[tokio::test]
async fn the_fallback_keeps_every_promise_while_the_shared_store_is_down() {
    promises::check(&Fallback::new(Box::new(Unreachable))).await;
    let memory = Memory::default();
    promises::check(&memory).await;
}
