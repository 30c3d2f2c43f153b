//! The promises every [`Keeping`] keeps, checked the same way on each backend.

use std::time::Duration;

use super::Entry;
use super::Keeping;

fn entry(principal: &str, access: &str) -> Entry {
    Entry {
        source: "tracker".into(),
        principal: principal.into(),
        access: access.into(),
        refresh: Some(format!("refresh-of-{principal}")),
        refresh_at: Some(1_900_000_000),
    }
}

/// Runs every check on `keeping`, which must hold nothing for "tracker" yet.
pub async fn check(keeping: &dyn Keeping) {
    tokens_are_kept_per_source_and_principal(keeping).await;
    one_owner_holds_a_turn_until_it_ends_or_runs_out(keeping).await;
    a_step_is_taken_once_and_not_after_its_time(keeping).await;
}

async fn tokens_are_kept_per_source_and_principal(keeping: &dyn Keeping) {
    keeping.keep(&entry("alice", "a1")).await.unwrap();
    keeping.keep(&entry("bob", "b1")).await.unwrap();
    keeping.keep(&entry("alice", "a2")).await.unwrap();
    let tokens = |p: &'static str| keeping.tokens("tracker", p);
    assert_eq!(tokens("alice").await.unwrap(), Some(entry("alice", "a2")));
    assert_eq!(tokens("bob").await.unwrap(), Some(entry("bob", "b1")));
    assert_eq!(keeping.tokens("wiki", "alice").await.unwrap(), None);
    let mut all: Vec<String> = keeping
        .all()
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.access)
        .collect();
    all.sort();
    assert_eq!(all, ["a2", "b1"]);
    assert!(keeping.forget("tracker", "alice").await.unwrap());
    assert!(!keeping.forget("tracker", "alice").await.unwrap());
    assert_eq!(tokens("alice").await.unwrap(), None);
    assert_eq!(tokens("bob").await.unwrap(), Some(entry("bob", "b1")));
    assert!(keeping.forget("tracker", "bob").await.unwrap());
}

async fn one_owner_holds_a_turn_until_it_ends_or_runs_out(keeping: &dyn Keeping) {
    let long = Duration::from_secs(30);
    let take = |owner: &'static str, lasts| keeping.take_turn("tracker", "alice", owner, lasts);
    assert!(take("one", long).await.unwrap());
    assert!(!take("two", long).await.unwrap());
    // Another principal's turn is another turn.
    assert!(
        keeping
            .take_turn("tracker", "bob", "two", long)
            .await
            .unwrap()
    );
    // Only its owner ends it.
    keeping.end_turn("tracker", "alice", "two").await.unwrap();
    assert!(!take("two", long).await.unwrap());
    keeping.end_turn("tracker", "alice", "one").await.unwrap();
    assert!(take("two", Duration::from_millis(50)).await.unwrap());
    // It runs out by itself, and the late end of its first owner leaves the next one's alone.
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert!(take("three", long).await.unwrap());
    keeping.end_turn("tracker", "alice", "two").await.unwrap();
    assert!(!take("four", long).await.unwrap());
    keeping.end_turn("tracker", "alice", "three").await.unwrap();
    keeping.end_turn("tracker", "bob", "two").await.unwrap();
}

async fn a_step_is_taken_once_and_not_after_its_time(keeping: &dyn Keeping) {
    let long = Duration::from_secs(30);
    keeping.put_step("s1", b"step one", long).await.unwrap();
    assert_eq!(
        keeping.peek_step("s1").await.unwrap().as_deref(),
        Some(&b"step one"[..])
    );
    assert_eq!(
        keeping.take_step("s1").await.unwrap().as_deref(),
        Some(&b"step one"[..])
    );
    assert_eq!(keeping.take_step("s1").await.unwrap(), None);
    assert_eq!(keeping.peek_step("s1").await.unwrap(), None);
    assert_eq!(keeping.take_step("never-made").await.unwrap(), None);
    keeping
        .put_step("s2", b"short", Duration::from_millis(50))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(keeping.peek_step("s2").await.unwrap(), None);
    assert_eq!(keeping.take_step("s2").await.unwrap(), None);
}
