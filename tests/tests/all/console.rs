//! The console in process: a tool called from the console goes through `/mcp`'s own layers as
//! the operator, so it is held to their tool set and their quota exactly as their MCP client
//! would be, and is watched like any other call; the live stream shows the calls running when
//! it opens.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt as _;
use moat::access::Principal;
use moat::access::quotas::Quota;
use moat::access::tool_sets::{Pattern, Rule, ToolSets, Who};
use moat::console::{Console, Serving};
use moat::mcp::catalogue::Catalogue;
use moat::mcp::http::auth::Authentication;
use moat::mcp::http::{Direct, Settings, router};
use moat::plugin::registry::Registry;
use moat::serve::config::{Admin, ConsoleSettings};
use moat::serve::reloads::{Current, Reloads};
use moat_tests::{engine, plugins, source};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt as _;

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

/// moat with its console beside `/mcp`, serving `plugin` with authentication off: the
/// anonymous caller is the operator.
fn with_console(name: &str, plugin: &str) -> (Catalogue, axum::Router) {
    let (registry, errors) = Registry::load(engine(), &[source(name, plugin)]).expect("a linker");
    assert!(errors.is_empty());
    let catalogue = Catalogue::from(Arc::new(registry));
    let reloads = Reloads::default();
    reloads.serving(Current {
        console: Some(ConsoleSettings {
            admins: vec![Admin::Principal("anonymous".into())],
            address: None,
            session: std::time::Duration::from_secs(60),
        }),
        ..Current::default()
    });
    let mut settings = Settings::new(Authentication::Off);
    let serving = Serving {
        catalogue: catalogue.clone(),
        reloads,
        live: settings.live.clone(),
        https: false,
        cluster: None,
    };
    settings.beside = Some(Box::new(move |direct| Console::routes(serving, direct)));
    let app = router(catalogue.clone(), CancellationToken::new(), settings);
    (catalogue, app)
}

async fn send(app: &axum::Router, request: Request<Body>) -> axum::response::Response {
    app.clone().oneshot(request).await.unwrap()
}

/// A session cookie, from a one-time link.
async fn signed_in(app: &axum::Router) -> String {
    let link = Request::post("/console/link")
        .header(header::HOST, "127.0.0.1")
        .body(Body::empty())
        .unwrap();
    let answer = send(app, link).await;
    assert_eq!(answer.status(), StatusCode::OK);
    let body = answer.into_body().collect().await.unwrap().to_bytes();
    let url: Value = serde_json::from_slice(&body).unwrap();
    let path = url["url"].as_str().unwrap().replace("http://127.0.0.1", "");
    let entered = send(app, Request::get(path).body(Body::empty()).unwrap()).await;
    let cookie = entered.headers()[header::SET_COOKIE].to_str().unwrap();
    cookie.split(';').next().unwrap().to_string()
}

#[tokio::test]
async fn the_live_stream_opens_with_the_calls_already_running() {
    let (catalogue, app) = with_console("chatty", plugins::CHATTY);
    let cookie = signed_in(&app).await;
    // A call that starts before the stream opens: its start event went to no one.
    let mcp = app.clone();
    let nap = tokio::spawn(async move {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "chatty_nap", "arguments": {"ms": 3000},
            "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                      "io.modelcontextprotocol/clientCapabilities": {}}}});
        let request = Request::post("/mcp")
            .header(header::HOST, "127.0.0.1")
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/call")
            .header("mcp-name", "chatty_nap")
            .body(Body::from(body.to_string()))
            .unwrap();
        send(&mcp, request).await.status()
    });
    let live = catalogue
        .live_calls()
        .expect("the console watches calls")
        .clone();
    for _ in 0..200 {
        if !live.now().0.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(live.now().0.len(), 1, "the nap runs");
    let events = Request::get("/console/live/events")
        .header(header::COOKIE, &cookie)
        .body(Body::empty())
        .unwrap();
    let mut stream = send(&app, events).await.into_body();
    let first = tokio::time::timeout(std::time::Duration::from_secs(2), stream.frame())
        .await
        .expect("the stream says something at once")
        .unwrap()
        .unwrap();
    let first = String::from_utf8_lossy(first.data_ref().unwrap()).into_owned();
    assert!(
        first.starts_with("event: call")
            && first.contains("\"tool\":\"chatty_nap\"")
            && !first.contains("ended"),
        "the running call comes first: {first}"
    );
    assert_eq!(nap.await.unwrap(), StatusCode::OK);
}
