//! The `fetch` plugin against a real HTTP server on loopback, granted through `moat.toml`.

use std::sync::Arc;

use moat::plugin::Plugin;
use moat_tests::{load_source, plugins, structured, try_call};
use serde_json::{Value, json};

use crate::loopback::{ConfigDir, Server, redirect, respond};

const PAGE: &str = "<!doctype html><html><head><title>T</title></head><body>\
    <h1>Moat</h1><p>Runs <b>untrusted</b> tools. <a href=\"/docs\">Docs</a></p>\
    <ul><li>one</li><li>two</li></ul></body></html>";

async fn site() -> Server {
    Server::start(|seen| match seen.uri.as_str() {
        "/page" => respond(200, "text/html; charset=utf-8", PAGE),
        "/old" => redirect("/page"),
        "/long.txt" => respond(200, "text/plain", "0123456789".repeat(3)),
        "/data.json" => respond(200, "application/json", r#"{"a":1}"#),
        "/image.png" => respond(200, "image/png", "\u{89}PNG"),
        _ => respond(404, "text/plain", "no such page"),
    })
    .await
}

fn fetch_plugin(dir: &ConfigDir, server: &Server) -> Arc<Plugin> {
    load_source(dir.source(
        "fetch",
        plugins::FETCH,
        "",
        &format!("network = [\"http://127.0.0.1:{}\"]", server.port()),
    ))
}

async fn fetch(plugin: &Plugin, args: Value) -> Result<Value, String> {
    let result = try_call(plugin, "fetch_fetch", args).await?;
    if result.is_error == Some(true) {
        return Err(result.content[0].as_text().unwrap().text.clone());
    }
    Ok(structured(&result).clone())
}

#[tokio::test]
async fn html_becomes_markdown() {
    let server = site().await;
    let dir = ConfigDir::new();
    let plugin = fetch_plugin(&dir, &server);
    let page = fetch(&plugin, json!({ "url": server.url("/page") }))
        .await
        .unwrap();
    let content = page["content"].as_str().unwrap();
    assert!(content.contains("# Moat"), "{content}");
    assert!(content.contains("**untrusted**"), "{content}");
    assert!(content.contains("[Docs](/docs)"), "{content}");
    assert!(
        content.contains("one") && !content.contains("<li>"),
        "{content}"
    );
    assert_eq!(page["status"], 200);
    assert_eq!(page["content-type"], "text/html; charset=utf-8");
    assert_eq!(page["next-index"], Value::Null);

    let raw = fetch(&plugin, json!({ "url": server.url("/page"), "raw": true }))
        .await
        .unwrap();
    assert!(raw["content"].as_str().unwrap().contains("<h1>Moat</h1>"));
}

#[tokio::test]
async fn long_text_comes_in_slices() {
    let server = site().await;
    let dir = ConfigDir::new();
    let plugin = fetch_plugin(&dir, &server);
    let url = server.url("/long.txt");
    let first = fetch(&plugin, json!({ "url": url, "max-length": 12 }))
        .await
        .unwrap();
    assert_eq!(first["content"], "012345678901");
    assert_eq!(first["total-length"], 30);
    assert_eq!(first["next-index"], 12);
    let last = fetch(
        &plugin,
        json!({ "url": url, "max-length": 20, "start-index": 12 }),
    )
    .await
    .unwrap();
    assert_eq!(last["content"], "234567890123456789");
    assert_eq!(last["next-index"], Value::Null);
    let error = fetch(&plugin, json!({ "url": url, "start-index": 30 }))
        .await
        .unwrap_err();
    assert!(
        error.contains("start-index 30 is past the end: the page has 30 characters"),
        "{error}"
    );
    let error = fetch(&plugin, json!({ "url": url, "max-length": 0 }))
        .await
        .unwrap_err();
    assert!(error.contains("max-length must be from 1 to"), "{error}");
}

#[tokio::test]
async fn redirects_json_and_errors() {
    let server = site().await;
    let dir = ConfigDir::new();
    let plugin = fetch_plugin(&dir, &server);
    let page = fetch(&plugin, json!({ "url": server.url("/old") }))
        .await
        .unwrap();
    assert_eq!(page["url"], server.url("/page"));
    assert!(page["content"].as_str().unwrap().contains("# Moat"));

    let json_page = fetch(&plugin, json!({ "url": server.url("/data.json") }))
        .await
        .unwrap();
    assert_eq!(json_page["content"], r#"{"a":1}"#);

    for (path, expected) in [
        ("/missing", "answered HTTP 404".to_string()),
        (
            "/image.png",
            format!("{} is image/png, not text", server.url("/image.png")),
        ),
    ] {
        let error = fetch(&plugin, json!({ "url": server.url(path) }))
            .await
            .unwrap_err();
        assert!(error.contains(&expected), "{path}: {error}");
    }
    let error = fetch(&plugin, json!({ "url": "file:///etc/passwd" }))
        .await
        .unwrap_err();
    assert!(
        error.contains("is not an http:// or https:// URL"),
        "{error}"
    );
    let error = fetch(&plugin, json!({ "url": "http://example.org/" }))
        .await
        .unwrap_err();
    assert!(
        error.contains("network access to example.org:80 denied: not granted to plugin \"fetch\""),
        "{error}"
    );
}
