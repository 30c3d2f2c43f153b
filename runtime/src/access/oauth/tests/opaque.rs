//! Opaque tokens: what an introspection answer must say, how long a revoked token lives on, and
//! what made-up tokens cost the issuer.

use std::time::Duration;

use serde_json::json;

use super::issuer::{Issuer, keys, now};
use crate::access::Via;
use crate::access::oauth::{OAuth, Settings, TokenError};

fn with(issuer: &Issuer, change: impl FnOnce(&mut Settings)) -> OAuth {
    let mut settings = issuer.settings();
    change(&mut settings);
    OAuth::new(settings).unwrap()
}

async fn refusal(oauth: &OAuth, token: &str) -> String {
    match oauth.verify(token).await {
        Err(TokenError::Invalid(why)) => why,
        other => panic!("expected an invalid token, got {other:?}"),
    }
}

#[tokio::test]
async fn an_answer_must_be_active_and_from_this_issuer_for_this_resource_and_now() {
    let issuer = Issuer::start(&[&keys()[0]]).await;
    let oauth = issuer.oauth();
    let good = issuer.opaque("good", issuer.active());
    let principal = oauth.verify(&good).await.unwrap();
    assert_eq!(
        (principal.name.as_str(), principal.via),
        ("alice", Via::Introspection)
    );
    let cases = [
        ("inactive", json!({"active": false}), "not active"),
        ("stringly", json!({"active": "true"}), "not active"),
        (
            "elsewhere",
            json!({"iss": "https://id.example.com"}),
            "another issuer (iss)",
        ),
        ("expired", json!({"exp": now() - 1}), "has expired"),
        ("early", json!({"nbf": now() + 3600}), "not valid yet (nbf)"),
        (
            "unbound",
            json!({"aud": "https://elsewhere.example.com/mcp"}),
            "not issued for this resource",
        ),
        (
            "spaced",
            json!({"aud": format!("https://other {}", super::issuer::AUDIENCE)}),
            "not issued for this resource",
        ),
        (
            "nobody",
            json!({"sub": null, "client_id": null}),
            "neither a subject",
        ),
    ];
    for (token, changes, expected) in cases {
        let mut answer = issuer.active();
        for (name, value) in changes.as_object().unwrap() {
            answer[name] = value.clone();
        }
        let token = issuer.opaque(token, answer);
        let why = refusal(&oauth, &token).await;
        assert!(why.contains(expected), "{token}: {why}");
    }
}

#[tokio::test]
async fn a_token_revoked_while_cached_is_refused_once_its_answer_expires() {
    let issuer = Issuer::start(&[&keys()[0]]).await;
    let cache = Duration::from_millis(500);
    let oauth = with(&issuer, |s| s.introspection.as_mut().unwrap().cache = cache);
    let token = issuer.opaque("revoked-soon", issuer.active());
    assert!(oauth.verify(&token).await.is_ok());
    issuer.opaque(&token, json!({"active": false}));
    // Within the cache the answer stands (at most `cache_seconds` late, as promised)…
    assert!(oauth.verify(&token).await.is_ok());
    assert_eq!(issuer.hits(|b| &b.introspection_hits), 1);
    tokio::time::sleep(cache + Duration::from_millis(100)).await;
    // …and after it the issuer is asked again, and says no.
    assert!(refusal(&oauth, &token).await.contains("not active"));
    assert_eq!(issuer.hits(|b| &b.introspection_hits), 2);
}

#[tokio::test]
async fn a_refused_token_is_not_asked_about_again_at_once() {
    let issuer = Issuer::start(&[&keys()[0]]).await;
    // Even when answers are not cached.
    let oauth = with(&issuer, |s| {
        s.introspection.as_mut().unwrap().cache = Duration::ZERO
    });
    for _ in 0..20 {
        assert!(refusal(&oauth, "made-up").await.contains("not active"));
    }
    assert_eq!(issuer.hits(|b| &b.introspection_hits), 1);
    // A good token is still asked about each time: only refusals are kept.
    let good = issuer.opaque("good", issuer.active());
    for _ in 0..3 {
        assert!(oauth.verify(&good).await.is_ok());
    }
    assert_eq!(issuer.hits(|b| &b.introspection_hits), 4);
}

#[tokio::test]
async fn made_up_tokens_cannot_make_moat_flood_the_issuer() {
    let issuer = Issuer::start(&[&keys()[0]]).await;
    let oauth = with(&issuer, |s| {
        s.introspection.as_mut().unwrap().max_per_second = 5
    });
    let known = issuer.opaque("known", issuer.active());
    assert!(oauth.verify(&known).await.is_ok());
    let (mut refused, mut held_back) = (0, 0);
    for i in 0..200 {
        match oauth.verify(&format!("made-up-{i}")).await {
            Err(TokenError::Invalid(_)) => refused += 1,
            Err(TokenError::Unavailable(why)) => {
                assert!(why.contains("too many unknown tokens"), "{why}");
                held_back += 1;
            }
            other => panic!("{other:?}"),
        }
    }
    // A second's worth at most (and whatever refilled while the test ran).
    let asked = issuer.hits(|b| &b.introspection_hits);
    assert!(asked <= 8, "the issuer was asked {asked} times");
    assert_eq!(refused + 1, asked);
    assert_eq!(refused + held_back, 200);
    // A token moat knows is not held back, and the budget comes back.
    assert!(oauth.verify(&known).await.is_ok());
    tokio::time::sleep(Duration::from_millis(500)).await;
    let fresh = issuer.opaque("fresh", issuer.active());
    assert!(oauth.verify(&fresh).await.is_ok());
}
