//! The promises every [`TaskRecords`] keeps, checked the same way on each backend.

use std::time::Duration;

use super::{Bounds, Stored, TaskRecords};

const LONG: Duration = Duration::from_secs(60);

/// Runs every check on `records`, which must hold no task yet.
pub async fn check(records: &dyn TaskRecords) {
    a_change_from_a_stale_read_is_refused(records).await;
    tasks_are_kept_within_their_bounds(records).await;
    a_task_ends_with_its_time(records).await;
}

async fn a_change_from_a_stale_read_is_refused(records: &dyn TaskRecords) {
    let bounds = Bounds {
        per_principal: 10,
        in_all: 10,
    };
    assert!(
        records
            .create("t1", "ada", "one", LONG, bounds)
            .await
            .unwrap()
    );
    let read = records.load("t1").await.unwrap().unwrap();
    assert_eq!(
        read,
        Stored {
            record: "one".into(),
            version: 1
        }
    );
    // Two changes from one read, at once: exactly one is made.
    let (a, b) = tokio::join!(
        records.replace("t1", 1, "two by a"),
        records.replace("t1", 1, "two by b")
    );
    assert!(
        a.unwrap() ^ b.unwrap(),
        "one of two changes from one read wins"
    );
    let now = records.load("t1").await.unwrap().unwrap();
    assert_eq!(now.version, 2);
    assert!(now.record.starts_with("two by"));
    assert!(!records.replace("t1", 1, "stale").await.unwrap());
    assert!(records.replace("t1", 2, "three").await.unwrap());
    assert_eq!(records.load("t1").await.unwrap().unwrap().record, "three");
    assert_eq!(records.load("t-unknown").await.unwrap(), None);
    assert!(!records.replace("t-unknown", 1, "x").await.unwrap());
}

async fn tasks_are_kept_within_their_bounds(records: &dyn TaskRecords) {
    // t1 (ada's) is kept from the check before.
    let bounds = Bounds {
        per_principal: 2,
        in_all: 3,
    };
    assert!(
        records
            .create("t2", "ada", "r", LONG, bounds)
            .await
            .unwrap()
    );
    assert!(
        !records
            .create("t3", "ada", "r", LONG, bounds)
            .await
            .unwrap(),
        "ada has two"
    );
    assert!(
        records
            .create("t4", "bob", "r", LONG, bounds)
            .await
            .unwrap()
    );
    assert!(
        !records.create("t5", "cy", "r", LONG, bounds).await.unwrap(),
        "three in all"
    );
    assert_eq!(records.load("t3").await.unwrap(), None);
    assert_eq!(records.load("t5").await.unwrap(), None);
}

async fn a_task_ends_with_its_time(records: &dyn TaskRecords) {
    let bounds = Bounds {
        per_principal: 1,
        in_all: 100,
    };
    let short = Duration::from_millis(300);
    assert!(
        records
            .create("t6", "dee", "r", short, bounds)
            .await
            .unwrap()
    );
    assert!(
        !records
            .create("t7", "dee", "r", short, bounds)
            .await
            .unwrap()
    );
    tokio::time::sleep(short + Duration::from_millis(100)).await;
    assert_eq!(records.load("t6").await.unwrap(), None);
    assert!(!records.replace("t6", 1, "late").await.unwrap());
    // Its place under dee's bound is free again.
    assert!(
        records
            .create("t7", "dee", "r", short, bounds)
            .await
            .unwrap()
    );
}
