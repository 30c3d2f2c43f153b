//! The promises every [`QuotaStore`] keeps, checked the same way on each backend.

use std::time::Duration;

use super::QuotaStore;

/// Runs every check on `quotas`, which must have counted nothing yet.
pub async fn check(quotas: &dyn QuotaStore) {
    a_bucket_lets_a_minutes_worth_through(quotas).await;
    slots_are_held_until_dropped(quotas).await;
    many_asking_at_once_get_no_more_than_the_limit(quotas).await;
}

async fn a_bucket_lets_a_minutes_worth_through(quotas: &dyn QuotaStore) {
    for _ in 0..3 {
        assert_eq!(quotas.take_token("ada", 3).await.unwrap(), Ok(()));
    }
    let wait = quotas.take_token("ada", 3).await.unwrap().unwrap_err();
    assert!(
        wait > Duration::from_secs(15) && wait <= Duration::from_secs(20),
        "a bucket of three refills one every 20 s: {wait:?}"
    );
    assert_eq!(
        quotas.take_token("bob", 3).await.unwrap(),
        Ok(()),
        "bob has his own"
    );
}

async fn slots_are_held_until_dropped(quotas: &dyn QuotaStore) {
    let first = quotas.take_slot("ada", Some(2)).await.unwrap().unwrap();
    let _second = quotas.take_slot("ada", Some(2)).await.unwrap().unwrap();
    assert!(quotas.take_slot("ada", Some(2)).await.unwrap().is_none());
    assert!(quotas.take_slot("bob", Some(2)).await.unwrap().is_some());
    let freed = quotas.freed("ada");
    drop(first);
    // Given back: the waiter wakes, and the slot is there to take.
    tokio::time::timeout(Duration::from_secs(5), freed)
        .await
        .expect("a dropped slot wakes who waits for one");
    let mut again = None;
    for _ in 0..50 {
        again = quotas.take_slot("ada", Some(2)).await.unwrap();
        if again.is_some() {
            break;
        }
        // Redis hears of a dropped slot a moment later.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(again.is_some(), "a dropped slot is given back");
}

async fn many_asking_at_once_get_no_more_than_the_limit(quotas: &dyn QuotaStore) {
    let asked = (0..20).map(|_| quotas.take_slot("cy", Some(3)));
    let held: Vec<_> = futures_util::future::join_all(asked)
        .await
        .into_iter()
        .map(|slot| slot.unwrap())
        .collect();
    assert_eq!(held.iter().filter(|slot| slot.is_some()).count(), 3);
}
