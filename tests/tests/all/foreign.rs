//! A component built with plain `wit-bindgen`, without moat's guest SDK: no `moat:wit` section,
//! so no doc comments, yet every tool works and gets a generated description.

use std::sync::{Arc, OnceLock};

use moat::plugin::Plugin;
use moat::supply::source::read_wasm;
use moat::wit::docs::PluginDocs;
use moat_tests::{load, plugins};
use serde_json::{Value, json};

use crate::shapes::{call, input_schema, output_schema, rejects, returns, tool, validator};

fn foreign() -> Arc<Plugin> {
    static FOREIGN: OnceLock<Arc<Plugin>> = OnceLock::new();
    FOREIGN
        .get_or_init(|| load("foreign", plugins::FOREIGN))
        .clone()
}

/// Every `description` anywhere in `schema`.
fn descriptions(schema: &Value) -> Vec<&Value> {
    match schema {
        Value::Object(object) => object
            .iter()
            .flat_map(|(key, value)| {
                let own = (key == "description").then_some(value);
                own.into_iter().chain(descriptions(value))
            })
            .collect(),
        Value::Array(items) => items.iter().flat_map(descriptions).collect(),
        _ => Vec::new(),
    }
}

#[test]
fn it_carries_no_docs() {
    let wasm = read_wasm(plugins::FOREIGN.as_ref()).unwrap();
    assert!(PluginDocs::from_component(&wasm).unwrap().is_none());
}

/// The plugin with `section` appended as its `moat:wit` custom section.
fn with_wit_section(section: &[u8]) -> Vec<u8> {
    let mut payload = vec![moat::wit::docs::WIT_SECTION.len() as u8];
    payload.extend_from_slice(moat::wit::docs::WIT_SECTION.as_bytes());
    payload.extend_from_slice(section);
    let mut wasm = read_wasm(plugins::FOREIGN.as_ref()).unwrap();
    wasm.push(0); // a custom section
    let mut size = payload.len();
    loop {
        let byte = (size & 0x7f) as u8;
        size >>= 7;
        wasm.push(if size == 0 { byte } else { byte | 0x80 });
        if size == 0 {
            break;
        }
    }
    wasm.extend(payload);
    wasm
}

#[test]
fn a_wit_section_that_breaks_its_decoder_is_a_malformed_one() {
    // Found by the `metadata` fuzz target (its first byte picks the section): wit-parser asserts
    // on the first two packages (in its decoder, and in the resolve it builds) instead of
    // returning an error. moat reads them as any malformed section: an error for the docs, and the plugin
    // loads with generated ones.
    // The third claims sections far longer than itself, which wit-parser allocated up front.
    let crashes: [&[u8]; 3] = [
        include_bytes!("../../../fuzz/corpus/metadata/wit-decoder-panic"),
        include_bytes!("../../../fuzz/corpus/metadata/wit-resolve-panic"),
        include_bytes!("../../../fuzz/corpus/metadata/wit-huge-section"),
    ];
    for crash in crashes {
        let wasm = with_wit_section(&crash[1..]);
        let error = PluginDocs::from_component(&wasm)
            .err()
            .expect("a malformed section");
        assert!(
            format!("{error:#}").contains("the WIT package is malformed"),
            "{error:#}"
        );

        let dir = moat_tests::TempDir::new("foreign-bad-wit");
        let path = dir.join("foreign.wasm");
        std::fs::write(&path, &wasm).unwrap();
        let plugin = load("foreign", path.to_str().unwrap());
        assert_eq!(
            tool(&plugin, "foreign_add").description,
            r#"Calls `add` of the plugin "foreign"."#
        );
    }
}

#[tokio::test]
async fn every_function_is_a_tool_with_a_generated_description() {
    let foreign = foreign();
    let names: Vec<&str> = foreign.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["foreign_add", "foreign_greet", "foreign_mean"]);
    assert!(foreign.skipped.is_empty(), "{:?}", foreign.skipped);
    assert_eq!(foreign.summary, None);
    assert_eq!(
        tool(&foreign, "foreign_add").description,
        r#"Calls `add` of the plugin "foreign"."#
    );
    assert_eq!(
        tool(&foreign, "foreign_greet").description,
        r#"Calls `greet` of the plugin "foreign"."#
    );
    assert_eq!(
        tool(&foreign, "foreign_mean").description,
        r#"Calls `other:foreign/stats@0.1.0#mean` of the plugin "foreign"."#
    );
    for tool in &foreign.tools {
        let input = input_schema(&foreign, &tool.name);
        validator(&input);
        assert_eq!(descriptions(&input), Vec::<&Value>::new(), "{}", tool.name);
        // `greet` returns a string: text alone, no output schema.
        if let Some(output) = output_schema(&foreign, &tool.name) {
            validator(&output);
            assert_eq!(descriptions(&output), Vec::<&Value>::new(), "{}", tool.name);
        }
    }
}

#[tokio::test]
async fn schemas_come_from_the_types_alone() {
    let foreign = foreign();
    let s32 = json!({"type": "integer", "minimum": i32::MIN, "maximum": i32::MAX});
    assert_eq!(
        input_schema(&foreign, "foreign_add"),
        json!({
            "type": "object",
            "properties": {"a": s32, "b": s32},
            "required": ["a", "b"],
            "additionalProperties": false,
        })
    );
    assert_eq!(
        input_schema(&foreign, "foreign_greet")["properties"]["who"],
        json!({
            "type": "object",
            "properties": {"name": {"type": "string"}, "excited": {"type": "boolean"}},
            "required": ["name", "excited"],
            "additionalProperties": false,
        })
    );
    assert_eq!(
        output_schema(&foreign, "foreign_mean").unwrap()["properties"]["value"],
        json!({"anyOf": [{"type": "number"}, {"type": "null"}]})
    );
}

#[tokio::test]
async fn its_tools_work() {
    let foreign = foreign();
    assert_eq!(
        returns(&foreign, "foreign_add", json!({"a": 2, "b": 3})).await,
        json!({"value": 5})
    );
    assert_eq!(
        returns(&foreign, "foreign_add", json!({"a": i32::MAX, "b": 1})).await,
        json!({"value": i32::MIN})
    );
    let greeting = call(
        &foreign,
        "foreign_greet",
        json!({"who": {"name": "Ann", "excited": true}}),
    )
    .await;
    assert_eq!(moat_tests::text(&greeting), "Hello, Ann!");
    assert_eq!(greeting.structured_content, None, "a string is text alone");
    assert_eq!(
        returns(&foreign, "foreign_mean", json!({"values": [1, 2, 4.5]})).await,
        json!({"value": 2.5})
    );
    assert_eq!(
        returns(&foreign, "foreign_mean", json!({"values": []})).await,
        json!({"value": null})
    );
}

#[tokio::test]
async fn its_arguments_are_checked() {
    let foreign = foreign();
    assert_eq!(
        rejects(&foreign, "foreign_add", json!({"a": 2147483648u32, "b": 0})).await,
        "a: expected integer -2147483648..=2147483647, got 2147483648"
    );
    assert_eq!(
        rejects(&foreign, "foreign_greet", json!({"who": {"name": "Ann"}})).await,
        "who.excited: missing required value"
    );
    assert_eq!(
        rejects(&foreign, "foreign_mean", json!({"values": [1, "2"]})).await,
        r#"values[1]: expected number, got "2""#
    );
}
