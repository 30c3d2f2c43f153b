//! The console's calls in process: a tool called from the console goes through `/mcp`'s own
//! layers as the operator, so it is held to their tool set and their quota exactly as their
//! MCP client would be, and is watched like any other call.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use moat::access::Principal;
use moat::access::quotas::Quota;
use moat::access::tool_sets::{Pattern, Rule, ToolSets, Who};
use moat::mcp::catalogue::Catalogue;
use moat::mcp::http::auth::Authentication;
use moat::mcp::http::{Direct, Settings, router};
use moat::plugin::registry::Registry;
use moat_tests::{engine, plugins, source};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// A catalogue serving echo, and `/mcp` as the console reaches it.
fn served() -> (Catalogue, Direct) {
    let (registry, errors) =
        Registry::load(engine(), &[source("echo", plugins::ECHO)]).expect("a linker");
    assert!(errors.is_empty());
    let catalogue = Catalogue::from(Arc::new(registry));
    let direct = Arc::new(Mutex::new(None));
    let mut settings = Settings::new(Authentication::Off);
    let kept = direct.clone();
    settings.beside = Some(Box::new(move |made| {
        *kept.lock().unwrap() = Some(made);
        axum::Router::new()
    }));
    let _router = router(catalogue.clone(), CancellationToken::new(), settings);
    let direct = direct
        .lock()
        .unwrap()
        .take()
        .expect("the console's way in was made");
    (catalogue, direct)
}

#[tokio::test]
async fn an_operators_call_is_held_to_their_tool_set_and_quota() {
    let (catalogue, direct) = served();
    let watched = catalogue.watch_calls();
    // alice may use echo_repeat only, once a minute.
    catalogue.set_tool_sets(ToolSets {
        rules: vec![Rule {
            who: Who {
                principal: Some("alice".into()),
                ..Who::default()
            },
            allow: vec![Pattern::parse("echo_repeat")],
            deny: Vec::new(),
        }],
        denied: Vec::new(),
    });
    let once_a_minute = Quota {
        requests_per_minute: Some(1),
        concurrent_calls: None,
    };
    catalogue.quotas().configure(
        Quota::default(),
        HashMap::from([("alice".to_string(), once_a_minute)]),
    );
    let alice = Principal::stdio("alice");
    let call = |tool: &'static str, arguments| {
        let (direct, alice) = (direct.clone(), alice.clone());
        async move { direct.call_tool(alice, None, tool, arguments).await }
    };

    let hidden = call("echo_echo", json!({"message": "hi"}))
        .await
        .unwrap_err();
    assert!(hidden.contains("unknown tool"), "{hidden}");
    let refused = call("echo_repeat", json!({"message": "a", "times": 2}))
        .await
        .unwrap_err();
    assert!(
        refused.contains("alice is over its request rate"),
        "the second request within the minute is over alice's rate: {refused}"
    );

    let (running, recent) = watched.now();
    assert!(running.is_empty());
    let seen: Vec<(&str, &str, &str)> = recent
        .iter()
        .map(|c| (&*c.principal, &*c.tool, &*c.ended.as_ref().unwrap().outcome))
        .collect();
    assert_eq!(
        seen,
        [("alice", "echo_echo", "unknown_tool")],
        "the refused call is watched as alice's; the one over the rate never reached a handler"
    );
}

#[tokio::test]
async fn an_operators_call_that_is_allowed_answers_as_a_client_would_see_it() {
    let (catalogue, direct) = served();
    let watched = catalogue.watch_calls();
    let answer = direct
        .call_tool(
            Principal::stdio("alice"),
            None,
            "echo_repeat",
            json!({"message": "ab", "times": 2}),
        )
        .await
        .unwrap();
    assert_eq!(answer["isError"], false, "{answer}");
    assert_eq!(answer["content"][0]["text"], "abab", "{answer}");
    assert_eq!(watched.now().1.len(), 1);
}
