//! The `conformance` plugin: served as `test`, its tools carry the names the MCP conformance suite
//! calls and answer what the suite checks (`tests/conformance/run` drives the suite itself).

use moat_tests::{call, load, plugins, text};
use serde_json::{Value, json};

fn content(result: &rmcp::model::CallToolResult) -> Value {
    serde_json::to_value(result).unwrap()["content"][0].clone()
}

/// The fixture names the suite's scenarios call (`tests/conformance/moat.toml` renames the few
/// it calls without the `test_` prefix).
const SUITE_TOOLS: &[&str] = &[
    "test_audio_content",
    "test_confirm_delete",
    "test_custom_headers",
    "test_elicitation",
    "test_elicitation_sep1034_defaults",
    "test_elicitation_sep1330_enums",
    "test_embedded_resource",
    "test_error_handling",
    "test_failing_job",
    "test_greet",
    "test_image_content",
    "test_input_required_result_capabilities",
    "test_input_required_result_elicitation",
    "test_input_required_result_list_roots",
    "test_input_required_result_multi_round",
    "test_input_required_result_multiple_inputs",
    "test_input_required_result_request_state",
    "test_input_required_result_sampling",
    "test_input_required_result_tampered_state",
    "test_json_schema_2020_12_tool",
    "test_logging_tool",
    "test_missing_capability",
    "test_multi_input",
    "test_multiple_content_types",
    "test_protocol_error_job",
    "test_sampling",
    "test_simple_text",
    "test_slow_compute",
    "test_streaming_elicitation",
    "test_tool_with_logging",
    "test_tool_with_progress",
    "test_tool_with_task",
];

#[tokio::test]
async fn serves_the_tool_names_the_suite_calls() {
    let test = load("test", plugins::CONFORMANCE);
    let mut names: Vec<&str> = test.tools.iter().map(|t| t.name.as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, SUITE_TOOLS);
    let prompts: Vec<&str> = test.prompts.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        prompts,
        [
            "test_input_required_result_prompt",
            "test_prompt_with_arguments",
            "test_prompt_with_embedded_resource",
            "test_prompt_with_image",
            "test_simple_prompt",
        ]
    );
    let uris: Vec<String> = test
        .resources
        .iter()
        .map(|r| test.uri(&r.template))
        .collect();
    assert_eq!(
        uris,
        [
            "test://static-binary",
            "test://static-text",
            "test://template/{id}/data",
            "test://watched-resource"
        ]
    );
}

#[tokio::test]
async fn doc_tags_give_titles_hints_headers_and_task_support() {
    let test = load("test", plugins::CONFORMANCE);
    let tool = |name: &str| test.tools.iter().find(|t| t.name == name).unwrap();
    let headers = tool("test_custom_headers");
    assert_eq!(headers.title.as_deref(), Some("Custom headers"));
    assert_eq!(
        headers.annotations.as_ref().and_then(|a| a.read_only_hint),
        Some(true)
    );
    assert_eq!(
        headers.input_schema["properties"]["region"]["x-mcp-header"],
        "Region"
    );
    assert!(
        !headers.description.contains('@'),
        "{}",
        headers.description
    );
    assert!(tool("test_failing_job").task_required);
    assert!(!tool("test_slow_compute").task_required);

    // A named type used twice is defined once, and the schema says its dialect.
    let schema = &tool("test_json_schema_2020_12_tool").input_schema;
    assert_eq!(
        schema["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
    assert_eq!(schema["$defs"]["address"]["type"], "object");
    assert_eq!(
        schema["properties"]["shippingAddress"]["anyOf"][0],
        json!({"$ref": "#/$defs/address"})
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
