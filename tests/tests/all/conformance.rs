//! The `conformance` plugin: served as `test`, its tools carry the names the MCP conformance suite
//! calls and answer what the suite checks (`tests/conformance/run` drives the suite itself).

use moat_tests::{call, load, plugins, text};
use serde_json::{Value, json};

fn content(result: &rmcp::model::CallToolResult) -> Value {
    serde_json::to_value(result).unwrap()["content"][0].clone()
}

#[tokio::test]
async fn serves_the_tool_names_the_suite_calls() {
    let test = load("test", plugins::CONFORMANCE);
    let mut names: Vec<&str> = test.tools.iter().map(|t| t.name.as_str()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "test_audio_content",
            "test_error_handling",
            "test_image_content",
            "test_logging_tool",
            "test_simple_text",
            "test_tool_with_logging",
            "test_tool_with_progress",
        ]
    );
}

#[tokio::test]
async fn media_tools_return_real_media() {
    let test = load("test", plugins::CONFORMANCE);
    let image = content(&call(&test, "test_image_content", json!({})).await);
    assert_eq!(image["mimeType"], "image/png");
    // Base64 of the PNG signature, `\x89PNG\r\n\x1a\n`.
    assert!(image["data"].as_str().unwrap().starts_with("iVBORw0KGgo"));

    let audio = content(&call(&test, "test_audio_content", json!({})).await);
    assert_eq!(audio["mimeType"], "audio/wav");
    // Base64 of `RIFF`, a little-endian size of 116 (36 + 80 samples), `WAVE`.
    assert!(
        audio["data"]
            .as_str()
            .unwrap()
            .starts_with("UklGRnQAAABXQVZF")
    );
}

#[tokio::test]
async fn text_and_error_tools_say_what_the_suite_expects() {
    let test = load("test", plugins::CONFORMANCE);
    let simple = call(&test, "test_simple_text", json!({})).await;
    assert_eq!(text(&simple), "This is a simple text response for testing.");
    let failed = call(&test, "test_error_handling", json!({})).await;
    assert_eq!(failed.is_error, Some(true));
    assert_eq!(
        text(&failed),
        "This tool intentionally returns an error for testing"
    );
}
