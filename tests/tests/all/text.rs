//! The `text` plugin: known answers for every tool, its error results, and its documentation.
//!
//! [`ok`] and [`fails`] are shared with the `time` plugin's tests.

use std::sync::{Arc, OnceLock};

use moat::plugin::Plugin;
use moat::wit::prose;
use moat_tests::{call, load, plugins, structured, text, try_call};
use serde_json::{Value, json};

fn plugin() -> Arc<Plugin> {
    static TEXT: OnceLock<Arc<Plugin>> = OnceLock::new();
    TEXT.get_or_init(|| load("text", plugins::TEXT)).clone()
}

/// Calls `tool` and returns its result's structured content (the `value` of a non-record), after
/// checking that it fits the tool's output schema; for a tool that returns a string, which has
/// no output schema, the text.
pub(crate) async fn ok(plugin: &Plugin, tool: &str, args: Value) -> Value {
    let result = call(plugin, tool, args).await;
    let Some(schema) = plugin
        .tools
        .iter()
        .find(|t| t.name == tool)
        .and_then(|t| t.output_schema.clone())
    else {
        assert_ne!(result.is_error, Some(true), "{tool} failed: {result:?}");
        assert_eq!(result.structured_content, None, "{result:?}");
        return Value::String(text(&result).to_string());
    };
    let content = structured(&result).clone();
    let validator = jsonschema::draft202012::new(&Value::Object((*schema).clone()))
        .expect("a compilable output schema");
    if let Err(e) = validator.validate(&content) {
        panic!("{tool}: {content} does not fit the output schema: {e}");
    }
    match content {
        Value::Object(mut object) if object.len() == 1 && object.contains_key("value") => {
            object.remove("value").unwrap()
        }
        other => other,
    }
}

/// Calls `tool`, expecting a tool error (`isError`); returns its message.
pub(crate) async fn fails(plugin: &Plugin, tool: &str, args: Value) -> String {
    let result = call(plugin, tool, args).await;
    assert_eq!(result.is_error, Some(true), "{tool} succeeded: {result:?}");
    assert!(result.structured_content.is_none());
    text(&result).to_string()
}

/// Every tool and parameter of `plugin` has a description, with no line break inside a
/// paragraph; no output schema carries prose.
pub(crate) fn assert_documented(plugin: &Plugin) {
    assert!(plugin.summary.is_some(), "{} has no summary", plugin.name);
    assert_unwrapped(&plugin.name, plugin.summary.as_deref().unwrap_or_default());
    assert!(plugin.skipped.is_empty(), "skipped: {:?}", plugin.skipped);
    for tool in &plugin.tools {
        assert!(
            !tool.description.starts_with("Calls `"),
            "{} has a generated description",
            tool.name
        );
        assert_unwrapped(&tool.name, &tool.description);
        for (param, schema) in tool.input_schema["properties"].as_object().unwrap() {
            assert!(
                schema.get("description").is_some(),
                "{}: parameter {param} is not described",
                tool.name
            );
            let about = schema["description"].as_str().unwrap_or_default();
            assert_unwrapped(&format!("{}.{param}", tool.name), about);
            // A parameter line is taken out of the tool's description.
            assert!(!tool.description.contains(&format!("{param}: ")));
        }
        // Output schemas give the shape alone: the prose is in the tool's description.
        if let Some(output) = &tool.output_schema {
            let text = serde_json::to_string(&**output).unwrap();
            assert!(
                !text.contains("\"description\":\""),
                "{}: {text}",
                tool.name
            );
        }
    }
}

/// No line of `text` goes on with the line before it: the WIT comment's wrapping is gone, and
/// only paragraphs, list items and code start new lines.
fn assert_unwrapped(what: &str, text: &str) {
    for pair in text.split('\n').collect::<Vec<_>>().windows(2) {
        assert!(
            pair[0].is_empty() || !prose::continues_paragraph(pair[1]),
            "{what}: a paragraph is broken before {:?}: {text:?}",
            pair[1]
        );
    }
}

#[tokio::test]
async fn every_tool_is_documented() {
    let text = plugin();
    let names: Vec<&str> = text.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "text_base64_decode",
            "text_base64_encode",
            "text_hash",
            "text_json_query",
            "text_regex_find",
            "text_regex_replace",
            "text_stats",
        ]
    );
    assert_documented(&text);
}

#[tokio::test]
async fn hash_gives_the_standard_digests() {
    let text = plugin();
    // The "abc" test vectors of FIPS 180 and RFC 1321.
    for (algorithm, digest) in [
        (
            "sha256",
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
        ),
        (
            "sha512",
            "ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a\
             2192992a274fc1a836ba3c23a3feebbd454d4423643ce80e2a9ac94fa54ca49f",
        ),
        ("sha1", "a9993e364706816aba3e25717850c26c9cd0d89d"),
        ("md5", "900150983cd24fb0d6963f7d28e17f72"),
    ] {
        let args = json!({"text": "abc", "algorithm": algorithm});
        assert_eq!(ok(&text, "text_hash", args).await, digest, "{algorithm}");
    }
    let base64 = json!({"text": "abc", "algorithm": "sha256", "encoding": "base64"});
    assert_eq!(
        ok(&text, "text_hash", base64).await,
        "ungWv48Bz+pBQUDeXa4iI7ADYaOWF3qctBD/YfIAFa0="
    );
    // The UTF-8 bytes are hashed, as given.
    let unicode = json!({"text": "héllo ✓", "algorithm": "sha256", "encoding": "hex"});
    assert_eq!(
        ok(&text, "text_hash", unicode).await,
        "5657cdef8a85a584e0e961e6f8247cf5d3f8ed21496ed6fdbcfd43a761e94245"
    );
    let unknown = json!({"text": "abc", "algorithm": "sha3"});
    let error = try_call(&text, "text_hash", unknown).await.unwrap_err();
    assert!(error.starts_with("invalid arguments: "), "{error}");
}

#[tokio::test]
async fn base64_encodes_with_either_alphabet() {
    let text = plugin();
    let encode = |args| ok(&text, "text_base64_encode", args);
    assert_eq!(encode(json!({"text": "hello?>"})).await, "aGVsbG8/Pg==");
    assert_eq!(
        encode(json!({"text": "hello?>", "urlSafe": false})).await,
        "aGVsbG8/Pg=="
    );
    assert_eq!(
        encode(json!({"text": "hello?>", "urlSafe": true})).await,
        "aGVsbG8_Pg"
    );
    assert_eq!(encode(json!({"text": "héllo ✓"})).await, "aMOpbGxvIOKckw==");
    assert_eq!(encode(json!({"text": ""})).await, "");
}

#[tokio::test]
async fn base64_decodes_leniently() {
    let text = plugin();
    for data in [
        "aGVsbG8/Pg==",
        "aGVsbG8_Pg",
        "aGVsbG8/Pg",
        "aGVs\nbG8/\r\n Pg==\n",
    ] {
        let decoded = ok(&text, "text_base64_decode", json!({"data": data})).await;
        assert_eq!(decoded, "hello?>", "{data:?}");
    }
    let unicode = ok(
        &text,
        "text_base64_decode",
        json!({"data": "aMOpbGxvIOKckw=="}),
    )
    .await;
    assert_eq!(unicode, "héllo ✓");
}

#[tokio::test]
async fn base64_decode_explains_bad_input() {
    let text = plugin();
    for (data, message) in [
        ("aGV!bG8=", "'!' is not a base64 character"),
        ("aGVsbG8/P", "one character too many or too few"),
        ("YR==", "stray bits"),
        ("YQ==YQ==", "`=` padding may only end the data"),
        // 0xff 0xfe: valid base64, but not UTF-8.
        (
            "//4=",
            "the data decodes to 2 bytes that are not UTF-8 text",
        ),
    ] {
        let error = fails(&text, "text_base64_decode", json!({"data": data})).await;
        assert!(error.contains(message), "{data:?}: {error}");
    }
}

#[tokio::test]
async fn regex_find_reports_matches_and_groups() {
    let text = plugin();
    let args = json!({"pattern": r"(?<key>\w+)=(\d+)?", "text": "é=1 b= c=22"});
    let matches = ok(&text, "text_regex_find", args).await;
    assert_eq!(
        matches,
        json!([
            // Offsets count characters: `é` is one, though two bytes.
            {"start": 0, "end": 3, "text": "é=1", "groups": ["é", "1"]},
            {"start": 4, "end": 6, "text": "b=", "groups": ["b", null]},
            {"start": 7, "end": 11, "text": "c=22", "groups": ["c", "22"]},
        ])
    );
    let limited = json!({"pattern": r"\d", "text": "a1b2c3", "limit": 2});
    let matches = ok(&text, "text_regex_find", limited).await;
    let found: Vec<&str> = matches
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["text"].as_str().unwrap())
        .collect();
    assert_eq!(found, ["1", "2"]);
    let flags = json!({"pattern": "(?i)^b", "text": "a\nB"});
    assert_eq!(ok(&text, "text_regex_find", flags).await, json!([]));
    let multiline = json!({"pattern": "(?im)^b", "text": "a\nB"});
    assert_eq!(
        ok(&text, "text_regex_find", multiline).await,
        json!([{"start": 2, "end": 3, "text": "B", "groups": []}])
    );
}

#[tokio::test]
async fn a_bad_pattern_is_a_tool_error() {
    let text = plugin();
    let error = fails(
        &text,
        "text_regex_find",
        json!({"pattern": "(a", "text": "a"}),
    )
    .await;
    assert!(error.starts_with("invalid regular expression"), "{error}");
    assert!(error.contains("unclosed group"), "{error}");
    let args = json!({"pattern": "a{2,1}", "text": "a", "replacement": ""});
    let error = fails(&text, "text_regex_replace", args).await;
    assert!(error.starts_with("invalid regular expression"), "{error}");
}

#[tokio::test]
async fn regex_replace_expands_groups() {
    let text = plugin();
    let replace = |args| ok(&text, "text_regex_replace", args);
    let dates = json!({
        "pattern": r"(?<year>\d{4})-(\d{2})",
        "text": "2024-03 and 2025-12",
        "replacement": "$2/${year}",
    });
    assert_eq!(replace(dates).await, "03/2024 and 12/2025");
    let first = json!({"pattern": "o", "text": "foo boo", "replacement": "0", "limit": 2});
    assert_eq!(replace(first).await, "f00 boo");
    let none = json!({"pattern": "o", "text": "foo", "replacement": "0", "limit": 0});
    assert_eq!(replace(none).await, "foo");
    let dollars = json!({"pattern": r"(\d+)", "text": "5", "replacement": "$$${1}.00"});
    assert_eq!(replace(dollars).await, "$5.00");
    let no_match = json!({"pattern": "x", "text": "abc", "replacement": "y"});
    assert_eq!(replace(no_match).await, "abc");
}

#[tokio::test]
async fn json_query_follows_a_pointer() {
    let text = plugin();
    let document =
        r#"{"users": [{"name": "Ada", "tags": ["x"]}], "a/b": 1, "m~n": true, "z": 0, "e": null}"#;
    let query = |pointer: &str| {
        ok(
            &text,
            "text_json_query",
            json!({"json": document, "pointer": pointer}),
        )
    };
    assert_eq!(query("/users/0/name").await, r#""Ada""#);
    assert_eq!(query("/users/0").await, r#"{"name":"Ada","tags":["x"]}"#);
    assert_eq!(query("/a~1b").await, "1");
    assert_eq!(query("/m~0n").await, "true");
    assert_eq!(query("/e").await, "null");
    // The whole document, compact, keys in their order.
    assert_eq!(
        query("").await,
        r#"{"users":[{"name":"Ada","tags":["x"]}],"a/b":1,"m~n":true,"z":0,"e":null}"#
    );
}

#[tokio::test]
async fn json_query_says_where_the_path_stops() {
    let text = plugin();
    let document = r#"{"users": [{"name": "Ada"}]}"#;
    for (pointer, message) in [
        ("/people", r#"the object at the root has no key "people""#),
        (
            "/users/1",
            r#"the array at `/users` has 1 items; "1" is not the index"#,
        ),
        ("/users/01", r#""01" is not the index"#),
        ("/users/-", r#""-" is not the index"#),
        (
            "/users/0/name/x",
            "the value at `/users/0/name` is a string",
        ),
        ("users", "invalid JSON Pointer"),
    ] {
        let args = json!({"json": document, "pointer": pointer});
        let error = fails(&text, "text_json_query", args).await;
        assert!(error.contains(message), "{pointer}: {error}");
    }
    let args = json!({"json": "{\"a\": ", "pointer": ""});
    let error = fails(&text, "text_json_query", args).await;
    assert!(error.starts_with("invalid JSON: "), "{error}");
    assert!(error.contains("line 1 column 6"), "{error}");
}

#[tokio::test]
async fn stats_counts_characters_words_lines_and_bytes() {
    let text = plugin();
    let stats = ok(
        &text,
        "text_stats",
        json!({"text": "héllo  world\nbye ✓\n"}),
    )
    .await;
    assert_eq!(
        stats,
        json!({"characters": 19, "words": 4, "lines": 2, "bytes": 22})
    );
    let empty = ok(&text, "text_stats", json!({"text": ""})).await;
    assert_eq!(
        empty,
        json!({"characters": 0, "words": 0, "lines": 0, "bytes": 0})
    );
    let unterminated = ok(&text, "text_stats", json!({"text": "a\n\nb"})).await;
    assert_eq!(unterminated["lines"], 3);
}
