//! JWTs a hostile client could make: each is refused, for the reason it deserves.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};

use super::issuer::{Issuer, forge, keys, now, sign};
use crate::access::Via;
use crate::access::oauth::{OAuth, TokenError};

async fn refusal(oauth: &OAuth, token: &str) -> String {
    match oauth.verify(token).await {
        Err(TokenError::Invalid(why)) => why,
        other => panic!("expected an invalid token, got {other:?}"),
    }
}

fn without(mut claims: Value, name: &str) -> Value {
    claims.as_object_mut().unwrap().remove(name);
    claims
}

#[tokio::test]
async fn a_token_signed_by_the_issuers_key_is_accepted() {
    let [one, _] = keys();
    let issuer = Issuer::start(&[one]).await;
    let principal = issuer
        .oauth()
        .verify(&sign(one, &issuer.claims()))
        .await
        .unwrap();
    assert_eq!(
        (principal.name.as_str(), principal.via),
        ("alice", Via::Jwt)
    );
}

#[tokio::test]
async fn an_unsigned_token_is_refused() {
    let [one, _] = keys();
    let issuer = Issuer::start(&[one]).await;
    let oauth = issuer.oauth();
    for alg in ["none", "None", "NONE"] {
        let token = forge(&json!({"alg": alg, "kid": "one"}), &issuer.claims(), b"");
        let why = refusal(&oauth, &token).await;
        assert!(why.contains("not a well-formed JWT"), "{alg}: {why}");
    }
}

#[tokio::test]
async fn a_token_keyed_with_the_public_key_as_an_hmac_secret_is_refused() {
    let [one, _] = keys();
    let issuer = Issuer::start(&[one]).await;
    let oauth = issuer.oauth();
    for alg in [Algorithm::HS256, Algorithm::HS384, Algorithm::HS512] {
        let mut header = Header::new(alg);
        header.kid = Some(one.kid.clone());
        let secret = EncodingKey::from_secret(&one.public_pem).unwrap();
        let token = jsonwebtoken::encode(&header, &issuer.claims(), &secret).unwrap();
        let why = refusal(&oauth, &token).await;
        assert!(why.contains("are not accepted"), "{alg:?}: {why}");
    }
}

#[tokio::test]
async fn a_forged_or_tampered_signature_is_refused() {
    let [one, two] = keys();
    let issuer = Issuer::start(&[one]).await;
    let oauth = issuer.oauth();
    // Signed by a key the issuer does not publish, under the id of one it does.
    let mut header = Header::new(Algorithm::RS256);
    header.kid = Some(one.kid.clone());
    let forged = jsonwebtoken::encode(&header, &issuer.claims(), &two.encoding).unwrap();
    let why = refusal(&oauth, &forged).await;
    assert!(why.contains("signature does not verify"), "{why}");
    // The issuer's token with another payload under its signature.
    let genuine = sign(one, &issuer.claims());
    let mut claims = issuer.claims();
    claims["sub"] = json!("root");
    let tampered = sign(one, &claims);
    let parts: Vec<&str> = genuine.split('.').collect();
    let payload = tampered.split('.').nth(1).unwrap();
    let spliced = format!("{}.{payload}.{}", parts[0], parts[2]);
    let why = refusal(&oauth, &spliced).await;
    assert!(why.contains("signature does not verify"), "{why}");
    // The genuine one still passes.
    assert!(oauth.verify(&genuine).await.is_ok());
}

#[tokio::test]
async fn times_issuer_and_audience_are_checked() {
    let [one, _] = keys();
    let issuer = Issuer::start(&[one]).await;
    let oauth = issuer.oauth();
    let cases = [
        (json!({"nbf": now() + 3600}), "not valid yet (nbf)"),
        (json!({"exp": now() - 1}), "has expired"),
        (
            json!({"iss": "https://id.example.com"}),
            "another issuer (iss)",
        ),
        (
            json!({"aud": "https://elsewhere.example.com/mcp"}),
            "another resource (aud)",
        ),
        (
            json!({"aud": ["https://a.example.com", "https://b.example.com"]}),
            "another resource (aud)",
        ),
    ];
    for (changes, expected) in cases {
        let mut claims = issuer.claims();
        for (name, value) in changes.as_object().unwrap() {
            claims[name] = value.clone();
        }
        let why = refusal(&oauth, &sign(one, &claims)).await;
        assert!(why.contains(expected), "{changes}: {why}");
    }
    for claim in ["exp", "aud", "iss"] {
        let why = refusal(&oauth, &sign(one, &without(issuer.claims(), claim))).await;
        assert!(
            why.contains(&format!("no `{claim}` claim")),
            "{claim}: {why}"
        );
    }
}

#[tokio::test]
async fn a_token_without_kid_is_refused_when_the_set_has_more_than_one_key() {
    let [one, two] = keys();
    let unnamed = |key| {
        let header = Header::new(Algorithm::RS256);
        move |claims: &Value| jsonwebtoken::encode(&header, claims, key).unwrap()
    };
    let issuer = Issuer::start(&[one, two]).await;
    let oauth = issuer.oauth();
    for key in [&one.encoding, &two.encoding] {
        let why = refusal(&oauth, &unnamed(key)(&issuer.claims())).await;
        assert!(why.contains("does not publish (kid missing)"), "{why}");
    }
    // A set of one key says which key it is.
    let single = Issuer::start(&[one]).await;
    let token = unnamed(&one.encoding)(&single.claims());
    assert!(single.oauth().verify(&token).await.is_ok());
}

#[tokio::test]
async fn a_key_set_over_1_mib_is_refused_whether_or_not_it_says_its_length() {
    let [one, _] = keys();
    for endless in [false, true] {
        let issuer = Issuer::start(&[one]).await;
        let mut keys = vec![one.jwk.clone()];
        // Padding keys moat would skip, past 1 MiB.
        keys.extend((0..2_000).map(|i| json!({"kty": "oct", "kid": i, "k": "x".repeat(600)})));
        *issuer.behaviour.jwks.lock().unwrap() = json!({"keys": keys}).to_string();
        // A body that never ends is cut off at the cap, not read until the timeout.
        issuer
            .behaviour
            .endless_jwks
            .store(endless, Ordering::SeqCst);
        let token = sign(one, &issuer.claims());
        let started = Instant::now();
        match issuer.oauth().verify(&token).await {
            Err(TokenError::Unavailable(why)) => {
                assert!(why.contains("larger than 1 MiB"), "{why}")
            }
            other => panic!("endless {endless}: {other:?}"),
        }
        assert!(started.elapsed() < Duration::from_secs(3));
    }
}
