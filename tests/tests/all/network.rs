//! Network grants end to end: real HTTP servers on loopback, plugins loaded through a real
//! `moat.toml`, requests allowed, denied and reported.

use std::sync::Arc;

use moat::plugin::Plugin;
use moat::sandbox::network::Resolver;
use moat_tests::{load_source, plugins, try_call};
use rmcp::model::CallToolResult;
use serde_json::json;

use crate::loopback::{ConfigDir, Server, redirect, respond};

fn text_of(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A tool error's text; panics on anything else.
fn tool_error(outcome: Result<CallToolResult, String>) -> String {
    let result = outcome.expect("the call runs");
    assert_eq!(
        result.is_error,
        Some(true),
        "expected a tool error: {result:?}"
    );
    text_of(&result)
}

fn hostile_with(dir: &ConfigDir, entry: &str) -> Arc<Plugin> {
    load_source(dir.source("hostile", plugins::HOSTILE, "", entry))
}

async fn hello_server() -> Server {
    Server::start(|_| respond(200, "text/plain", "hello from loopback")).await
}

#[tokio::test]
async fn a_granted_host_is_reached() {
    let server = hello_server().await;
    let dir = ConfigDir::new();
    let plugin = hostile_with(
        &dir,
        &format!("network = [\"http://127.0.0.1:{}\"]", server.port()),
    );
    let result = try_call(
        &plugin,
        "hostile_http_get",
        json!({ "url": server.url("/hi?x=1") }),
    )
    .await
    .unwrap();
    assert_ne!(result.is_error, Some(true), "{result:?}");
    let text = text_of(&result);
    assert!(text.starts_with("status 200"), "{text}");
    assert!(text.contains("hello from loopback"), "{text}");
    let seen = server.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].uri, "/hi?x=1");
    assert_eq!(
        seen[0].headers["host"],
        format!("127.0.0.1:{}", server.port())
    );
}

#[tokio::test]
async fn without_a_grant_the_request_is_denied_by_name() {
    let server = hello_server().await;
    let dir = ConfigDir::new();
    // A component with its own wasi:http bindings loads, and is held to the same rules.
    let plugin = load_source(dir.source("wants_http", plugins::WANTS_HTTP, "", ""));
    let authority = format!("127.0.0.1:{}", server.port());
    let tool = plugin
        .tools
        .iter()
        .find(|t| t.name == "wants_http_fetch")
        .unwrap();
    let args = json!({ "authority": authority });
    let outcome = plugin.call_outcome(tool, args.as_object(), None).await;
    let expected =
        format!("network access to {authority} denied: not granted to plugin \"wants_http\"");
    assert_eq!(
        outcome.denials,
        std::slice::from_ref(&expected),
        "{:?}",
        outcome.result
    );
    let result = outcome.result.expect("the call runs");
    assert_eq!(result.is_error, Some(true));
    let text = text_of(&result);
    assert!(text.starts_with(&expected), "{text}");
    assert!(
        text.contains("HttpRequestDenied"),
        "the guest's own error follows: {text}"
    );
    assert!(server.seen().is_empty(), "the server was reached");
}

#[tokio::test]
async fn a_denial_the_guest_swallows_is_still_reported() {
    let server = hello_server().await;
    let dir = ConfigDir::new();
    let plugin = hostile_with(&dir, "network = [\"https://api.open-meteo.com\"]");
    let text = tool_error(
        try_call(
            &plugin,
            "hostile_http_probe",
            json!({ "url": server.url("/") }),
        )
        .await,
    );
    assert!(
        text.contains(&format!(
            "network access to 127.0.0.1:{} denied: not granted to plugin \"hostile\"",
            server.port()
        )),
        "{text}"
    );
    assert!(server.seen().is_empty());
    // The next call, denied nothing, is an ordinary success.
    let ok = try_call(&plugin, "hostile_ok", json!({})).await.unwrap();
    assert_ne!(ok.is_error, Some(true));
}

#[tokio::test]
async fn a_name_that_resolves_to_loopback_is_refused() {
    // The server would answer if the request got through: the refusal is moat's.
    let server = hello_server().await;
    let dir = ConfigDir::new();
    let mut source = dir.source(
        "hostile",
        plugins::HOSTILE,
        "",
        &format!("network = [\"http://rebind.test:{}\"]", server.port()),
    );
    let mut network = (*source.grants.network).clone();
    network.resolver = Resolver::table([(
        "rebind.test".to_string(),
        vec!["127.0.0.1".parse().unwrap()],
    )]);
    source.grants.network = network.into();
    let plugin = load_source(source);
    let url = format!("http://rebind.test:{}/", server.port());
    let text = tool_error(try_call(&plugin, "hostile_http_get", json!({ "url": url })).await);
    assert!(
        text.contains(&format!(
            "network access to rebind.test:{} denied: it resolves to 127.0.0.1, a loopback address",
            server.port()
        )),
        "{text}"
    );
    assert!(server.seen().is_empty(), "the loopback server was reached");
}

#[tokio::test]
async fn a_redirect_to_a_host_not_granted_is_denied() {
    let forbidden = hello_server().await;
    let target = forbidden.url("/secret");
    let server = Server::start(move |_| redirect(&target)).await;
    let dir = ConfigDir::new();
    let plugin = hostile_with(
        &dir,
        &format!("network = [\"http://127.0.0.1:{}\"]", server.port()),
    );
    let text = tool_error(
        try_call(
            &plugin,
            "hostile_http_get",
            json!({ "url": server.url("/go"), "follow": true }),
        )
        .await,
    );
    assert!(
        text.contains(&format!(
            "network access to 127.0.0.1:{} denied",
            forbidden.port()
        )),
        "{text}"
    );
    assert_eq!(server.seen().len(), 1);
    assert!(
        forbidden.seen().is_empty(),
        "the redirect target was reached"
    );
}

#[tokio::test]
async fn injected_credentials_reach_the_server_and_never_the_guest() {
    const TOKEN: &str = "tok-injected-3e9f";
    let server = hello_server().await;
    let dir = ConfigDir::new();
    dir.secrets(&format!("API_TOKEN = \"{TOKEN}\"\n"));
    let plugin = load_source(dir.source(
        "hostile",
        plugins::HOSTILE,
        "secrets = \"secrets.toml\"",
        &format!(
            "network = [\"http://127.0.0.1:{port}\"]\n\
             inject = [{{ host = \"http://127.0.0.1:{port}\", header = \"Authorization\", value = \"Bearer ${{secret:API_TOKEN}}\" }}]",
            port = server.port()
        ),
    ));
    let mut guest_saw = String::new();
    for (tool, args) in [
        ("hostile_http_get", json!({ "url": server.url("/api") })),
        ("hostile_env_vars", json!({})),
    ] {
        let result = try_call(&plugin, tool, args).await.unwrap();
        guest_saw.push_str(&text_of(&result));
    }
    assert!(guest_saw.contains("hello from loopback"), "{guest_saw}");
    assert!(
        !guest_saw.contains(TOKEN),
        "the guest saw the secret: {guest_saw}"
    );
    let seen = server.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].headers["authorization"], format!("Bearer {TOKEN}"));
}

#[tokio::test]
async fn an_injection_without_a_scheme_never_travels_over_plain_http() {
    const TOKEN: &str = "tok-https-only-7a1c";
    let server = hello_server().await;
    let dir = ConfigDir::new();
    dir.secrets(&format!("API_TOKEN = \"{TOKEN}\"\n"));
    // The grant allows plain http to any port; the injection names no scheme, so https only.
    let plugin = load_source(dir.source(
        "hostile",
        plugins::HOSTILE,
        "secrets = \"secrets.toml\"",
        "network = [\"127.0.0.1:*\"]\n\
         inject = [{ host = \"127.0.0.1\", header = \"Authorization\", value = \"Bearer ${secret:API_TOKEN}\" }]",
    ));
    let result = try_call(
        &plugin,
        "hostile_http_get",
        json!({ "url": server.url("/api") }),
    )
    .await
    .unwrap();
    assert!(
        text_of(&result).contains("hello from loopback"),
        "{result:?}"
    );
    let seen = server.seen();
    assert_eq!(seen.len(), 1);
    assert!(
        !seen[0].headers.contains_key("authorization"),
        "the secret went out over plain http: {:?}",
        seen[0].headers
    );
}

#[tokio::test]
async fn raw_tcp_needs_a_grant_naming_the_ip_address() {
    let server = hello_server().await;
    let other = hello_server().await;
    let dir = ConfigDir::new();
    let plugin = hostile_with(
        &dir,
        &format!("network = [\"http://127.0.0.1:{}\"]", server.port()),
    );
    let result = try_call(
        &plugin,
        "hostile_tcp_connect",
        json!({ "address": format!("127.0.0.1:{}", server.port()) }),
    )
    .await
    .unwrap();
    assert_ne!(result.is_error, Some(true), "{result:?}");
    assert!(text_of(&result).contains("HTTP/1.0 200"), "{result:?}");
    let text = tool_error(
        try_call(
            &plugin,
            "hostile_tcp_connect",
            json!({ "address": format!("127.0.0.1:{}", other.port()) }),
        )
        .await,
    );
    assert!(
        text.contains(&format!(
            "network access to 127.0.0.1:{} denied: not granted to plugin \"hostile\"",
            other.port()
        )),
        "{text}"
    );
    assert!(other.seen().is_empty());
}

#[tokio::test]
async fn https_to_a_server_without_tls_fails_cleanly() {
    let server = hello_server().await;
    let dir = ConfigDir::new();
    let plugin = hostile_with(
        &dir,
        &format!("network = [\"https://127.0.0.1:{}\"]", server.port()),
    );
    let url = format!("https://127.0.0.1:{}/", server.port());
    let text = tool_error(try_call(&plugin, "hostile_http_get", json!({ "url": url })).await);
    assert!(!text.contains("denied"), "the grant covers it: {text}");
    assert!(
        server.seen().is_empty(),
        "no HTTP request got through: {text}"
    );
    let ok = try_call(&plugin, "hostile_ok", json!({})).await.unwrap();
    assert_ne!(ok.is_error, Some(true));
}
