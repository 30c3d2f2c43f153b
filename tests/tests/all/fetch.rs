//! The `fetch` plugin against a real HTTP server on loopback, granted through `moat.toml`.

use std::sync::Arc;

use moat::plugin::Plugin;
use moat_tests::{load_source, plugins, try_call};
use serde_json::{Value, json};

use crate::loopback::{ConfigDir, Server, redirect, respond};

const PAGE: &str = "<!doctype html><html><head><title>T</title>\
    <style>body { color: red }</style><script>var tracking = 1;</script></head><body>\
    <h1>Moat</h1><p>Runs <b>untrusted</b> tools. <a href=\"/docs\">Docs</a></p>\
    <noscript>enable scripts</noscript><img src=\"img/logo.png\" alt=\"logo\">\
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

/// The page's text and the note on what was fetched: two text blocks, no structured content.
#[derive(Debug)]
struct Fetched {
    content: String,
    note: String,
}

async fn fetch(plugin: &Plugin, args: Value) -> Result<Fetched, String> {
    let result = try_call(plugin, "fetch_fetch", args).await?;
    let text = |i: usize| result.content[i].as_text().unwrap().text.clone();
    if result.is_error == Some(true) {
        return Err(text(0));
    }
    assert_eq!(result.structured_content, None, "{result:?}");
    assert_eq!(result.content.len(), 2, "{result:?}");
    Ok(Fetched {
        content: text(0),
        note: text(1),
    })
}

#[tokio::test]
async fn html_becomes_markdown() {
    let server = site().await;
    let dir = ConfigDir::new();
    let plugin = fetch_plugin(&dir, &server);
    let page = fetch(&plugin, json!({ "url": server.url("/page") }))
        .await
        .unwrap();
    let content = &page.content;
    assert!(content.contains("# Moat"), "{content}");
    assert!(content.contains("**untrusted**"), "{content}");
    assert!(
        content.contains(&format!("[Docs]({})", server.url("/docs"))),
        "{content}"
    );
    assert!(content.contains(&server.url("/img/logo.png")), "{content}");
    assert!(
        content.contains("one") && !content.contains("<li>"),
        "{content}"
    );
    for hidden in ["color: red", "tracking", "enable scripts"] {
        assert!(!content.contains(hidden), "{hidden} in {content}");
    }
    let note = &page.note;
    assert!(
        note.contains("HTTP 200")
            && note.contains("text/html; charset=utf-8")
            && note.contains("the whole text"),
        "{note}"
    );

    let raw = fetch(&plugin, json!({ "url": server.url("/page"), "raw": true }))
        .await
        .unwrap();
    assert!(raw.content.contains("<h1>Moat</h1>"), "{}", raw.content);
}

#[tokio::test]
async fn long_text_comes_in_slices() {
    let server = site().await;
    let dir = ConfigDir::new();
    let plugin = fetch_plugin(&dir, &server);
    let url = server.url("/long.txt");
    let first = fetch(&plugin, json!({ "url": url, "maxLength": 12 }))
        .await
        .unwrap();
    assert_eq!(first.content, "012345678901");
    assert!(
        first.note.contains("characters 0 to 12 of 30") && first.note.contains("start index 12"),
        "{}",
        first.note
    );
    let last = fetch(
        &plugin,
        json!({ "url": url, "maxLength": 20, "startIndex": 12 }),
    )
    .await
    .unwrap();
    assert_eq!(last.content, "234567890123456789");
    assert!(last.note.contains("the end of the text"), "{}", last.note);
    let error = fetch(&plugin, json!({ "url": url, "startIndex": 30 }))
        .await
        .unwrap_err();
    // The plugin's error names the parameter as WIT does; the model reads its JSON name.
    assert!(
        error.contains("startIndex 30 is past the end: the page has 30 characters"),
        "{error}"
    );
    let error = fetch(&plugin, json!({ "url": url, "maxLength": 0 }))
        .await
        .unwrap_err();
    assert!(
        error.contains("maxLength: 0 is less than the minimum of 1"),
        "{error}"
    );
}

#[tokio::test]
async fn redirects_json_and_errors() {
    let server = site().await;
    let dir = ConfigDir::new();
    let plugin = fetch_plugin(&dir, &server);
    let page = fetch(&plugin, json!({ "url": server.url("/old") }))
        .await
        .unwrap();
    assert!(
        page.note
            .contains(&format!("Fetched {}", server.url("/page"))),
        "{}",
        page.note
    );
    assert!(page.content.contains("# Moat"));

    let json_page = fetch(&plugin, json!({ "url": server.url("/data.json") }))
        .await
        .unwrap();
    assert_eq!(json_page.content, r#"{"a":1}"#);

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
    // The schema's pattern refuses it before the plugin runs.
    assert!(error.contains("url: "), "{error}");
    let error = fetch(&plugin, json!({ "url": "http://example.org/" }))
        .await
        .unwrap_err();
    assert!(
        error.contains("network access to example.org:80 denied: not granted to plugin \"fetch\""),
        "{error}"
    );
}
