//! The issuer's metadata while the issuer is down: asked for at most once per cooldown.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::issuer::{Issuer, keys, sign};
use crate::access::oauth::{OAuth, TokenError};

#[tokio::test]
async fn while_the_issuer_is_down_its_metadata_is_fetched_once_per_cooldown() {
    let [one, _] = keys();
    let issuer = Issuer::start(&[one]).await;
    issuer.behaviour.metadata_up.store(false, Ordering::SeqCst);
    let cooldown = Duration::from_millis(500);
    let mut settings = issuer.settings();
    settings.jwks_cooldown = cooldown;
    let oauth = OAuth::new(settings).unwrap();
    let jwt = sign(one, &issuer.claims());
    for token in ["opaque-1", "opaque-2", &jwt].iter().cycle().take(30) {
        match oauth.verify(token).await {
            Err(TokenError::Unavailable(why)) => {
                assert!(why.contains("metadata could not be fetched"), "{why}")
            }
            other => panic!("{other:?}"),
        }
    }
    // One fetch: both of its well-known addresses.
    assert_eq!(issuer.hits(|b| &b.metadata_hits), 2);
    assert_eq!(issuer.hits(|b| &b.introspection_hits), 0);
    // Back up: once the cooldown has passed, the next request fetches it.
    issuer.behaviour.metadata_up.store(true, Ordering::SeqCst);
    tokio::time::sleep(cooldown).await;
    assert!(oauth.verify(&jwt).await.is_ok());
    assert_eq!(issuer.hits(|b| &b.metadata_hits), 3);
}
