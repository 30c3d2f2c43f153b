//! Every call runs in an instance no other call has used: what one call leaves anywhere in guest
//! memory (statics, heap, stack) is gone for the next, whether its instance was made ahead of
//! the call or during it, and however its memory was reset.

use moat_tests::{call, load, plugins, text};
use serde_json::json;

const SECRET: &str = "moat-secret-7f3a91c2";

fn reversed(text: &str) -> String {
    text.chars().rev().collect()
}

#[tokio::test]
async fn nothing_one_call_leaves_in_memory_reaches_the_next() {
    let plugin = load("hostile", plugins::HOSTILE);
    // The search works: it finds a string the component carries in its data.
    let control = call(
        &plugin,
        "hostile_recall",
        json!({"reversed": reversed("stashed")}),
    )
    .await;
    assert!(text(&control).starts_with("found at"), "{}", text(&control));

    for round in 0..20 {
        let stashed = call(&plugin, "hostile_stash", json!({"secret": SECRET})).await;
        assert_eq!(text(&stashed), "stashed");
        // Right after (the instance made ahead of this call may be waiting already), and after
        // the instance thread has had time to make the next one.
        if round % 2 == 1 {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        let recalled = call(
            &plugin,
            "hostile_recall",
            json!({"reversed": reversed(SECRET)}),
        )
        .await;
        assert_eq!(text(&recalled), "not found", "round {round}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_side_by_side_each_get_their_own_instance() {
    let plugin = load("hostile", plugins::HOSTILE);
    let calls: Vec<_> = (0..16)
        .map(|i| {
            let plugin = plugin.clone();
            tokio::spawn(async move {
                let secret = format!("{SECRET}-{i:02}");
                call(&plugin, "hostile_stash", json!({"secret": secret})).await;
                let recalled = call(
                    &plugin,
                    "hostile_recall",
                    json!({"reversed": reversed(&secret)}),
                )
                .await;
                text(&recalled).to_string()
            })
        })
        .collect();
    for recalled in calls {
        assert_eq!(recalled.await.unwrap(), "not found");
    }
}
