//! Every WIT type shape, through the `shapes` plugin: the exact schema moat makes of it, values
//! sent to the guest and back, the message of every kind of invalid argument, and the descriptions
//! taken from doc comments.
//!
//! Every call goes through [`run`], which also checks moat against an independent JSON Schema
//! validator: the arguments moat accepts are exactly those its input schema accepts, and every
//! structured result fits the tool's output schema.

use std::sync::{Arc, OnceLock};

use moat::plugin::{Plugin, Tool};
use moat_tests::{load, plugins, try_call};
use rmcp::model::CallToolResult;
use serde_json::{Value, json};

/// The `shapes` plugin, compiled once for every test here.
fn shapes() -> Arc<Plugin> {
    static SHAPES: OnceLock<Arc<Plugin>> = OnceLock::new();
    SHAPES
        .get_or_init(|| load("shapes", plugins::SHAPES))
        .clone()
}

pub(crate) fn tool<'a>(plugin: &'a Plugin, name: &str) -> &'a Tool {
    plugin
        .tools
        .iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("{} has no tool {name}", plugin.name))
}

pub(crate) fn input_schema(plugin: &Plugin, name: &str) -> Value {
    Value::Object((*tool(plugin, name).input_schema).clone())
}

pub(crate) fn output_schema(plugin: &Plugin, name: &str) -> Option<Value> {
    tool(plugin, name)
        .output_schema
        .as_ref()
        .map(|schema| Value::Object((**schema).clone()))
}

/// The schema of one parameter.
fn param(plugin: &Plugin, name: &str, param: &str) -> Value {
    input_schema(plugin, name)["properties"][param].clone()
}

/// A validator for `schema`, which must itself be a valid draft 2020-12 schema.
pub(crate) fn validator(schema: &Value) -> jsonschema::Validator {
    if let Err(e) = jsonschema::draft202012::meta::validate(schema) {
        panic!("not a valid draft 2020-12 schema ({e}): {schema}");
    }
    jsonschema::draft202012::new(schema).expect("a compilable schema")
}

/// Calls `name` with `args`, and checks moat against the tool's schemas on the way: moat rejects
/// the arguments exactly when the input schema does, and structured content fits the output
/// schema (which exists exactly when a successful call gives structured content).
pub(crate) async fn run(
    plugin: &Plugin,
    name: &str,
    args: Value,
) -> Result<CallToolResult, String> {
    let tool = tool(plugin, name);
    let schema_accepts = validator(&input_schema(plugin, name)).is_valid(&args);
    let result = try_call(plugin, name, args.clone()).await;
    match &result {
        Err(e) if e.starts_with("invalid arguments: ") => assert!(
            !schema_accepts,
            "{name}: moat rejects {args} ({e}), but its input schema accepts it"
        ),
        _ => assert!(
            schema_accepts,
            "{name}: moat accepts {args}, but its input schema rejects it"
        ),
    }
    if let Ok(result) = &result {
        match (&tool.output_schema, &result.structured_content) {
            (Some(schema), Some(content)) => {
                let schema = Value::Object((**schema).clone());
                if let Err(e) = validator(&schema).validate(content) {
                    panic!("{name}: {content} does not fit its output schema: {e}");
                }
            }
            (None, Some(content)) => {
                panic!("{name}: structured content {content} without an output schema")
            }
            (Some(_), None) => assert_eq!(
                result.is_error,
                Some(true),
                "{name}: a successful call without the structured content its output schema \
                 promises: {result:?}"
            ),
            (None, None) => {}
        }
    }
    result
}

/// The structured content of a successful call.
pub(crate) async fn returns(plugin: &Plugin, name: &str, args: Value) -> Value {
    let result = call(plugin, name, args.clone()).await;
    assert_eq!(
        result.is_error,
        Some(false),
        "{name} with {args}: {result:?}"
    );
    match result.structured_content {
        Some(content) => content,
        // A string comes back as text alone (its tool has no output schema): seen as the value.
        None => {
            assert_eq!(output_schema(plugin, name), None, "{name}");
            json!({"value": moat_tests::text(&result)})
        }
    }
}

/// Sends `value` as the only argument `param` of `name` and checks that it comes back unchanged.
async fn round_trip(plugin: &Plugin, name: &str, param: &str, value: Value) {
    let back = returns(plugin, name, json!({ param: value.clone() })).await;
    assert_eq!(back, json!({"value": value}), "{name} changed {value}");
}

/// The result of a call moat carries out (which may still be a tool error).
pub(crate) async fn call(plugin: &Plugin, name: &str, args: Value) -> CallToolResult {
    run(plugin, name, args.clone())
        .await
        .unwrap_or_else(|e| panic!("{name} with {args}: {e}"))
}

/// The message of a call moat refuses, without the `invalid arguments: ` prefix.
pub(crate) async fn rejects(plugin: &Plugin, name: &str, args: Value) -> String {
    match run(plugin, name, args.clone()).await {
        Ok(result) => panic!("{name} accepted {args}: {result:?}"),
        Err(e) => e
            .strip_prefix("invalid arguments: ")
            .unwrap_or_else(|| panic!("{name} with {args} failed, but not on its arguments: {e}"))
            .to_string(),
    }
}

/// The content blocks of a result, as MCP sends them.
fn content(result: &CallToolResult) -> Value {
    serde_json::to_value(&result.content).expect("content serializes")
}

fn integer(min: Value, max: Value) -> Value {
    json!({"type": "integer", "minimum": min, "maximum": max})
}

fn with_description(mut schema: Value, description: &str) -> Value {
    schema["description"] = description.into();
    schema
}

fn nullable(schema: Value) -> Value {
    json!({"anyOf": [schema, {"type": "null"}]})
}

/// One arm of a `result`: `{"ok": …}` or `{"err": …}`.
fn arm(name: &str, payload: Value) -> Value {
    json!({
        "type": "object",
        "properties": {name: payload},
        "required": [name],
        "additionalProperties": false,
    })
}

fn object(properties: Value, required: &[&str], description: &str) -> Value {
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
        "description": description,
    })
}

fn point_schema() -> Value {
    object(
        json!({
            "x": {"type": "number", "description": "Distance from the left edge."},
            "y": {"type": "number", "description": "Distance from the top edge."},
        }),
        &["x", "y"],
        "A point on a plane.",
    )
}

fn color_schema() -> Value {
    json!({
        "type": "string",
        "enum": ["red", "green", "blue"],
        // Case comments have no place of their own in JSON Schema: they join the description.
        "description": "A primary colour.\n`red`: The colour of fire.",
    })
}

fn person_schema() -> Value {
    object(
        json!({
            "name": {"type": "string", "description": "What they are called."},
            "age": with_description(nullable(integer(json!(0), json!(255))), "Age in years, when known."),
            "favourite": nullable(color_schema()),
            "tags": {"type": "array", "items": {"type": "string"}, "description": "Labels, perhaps none."},
        }),
        &["name", "tags"],
        "Someone, with what is known about them.",
    )
}

fn problem_schema() -> Value {
    object(
        json!({
            "code": with_description(integer(json!(0), json!(65535)), "For machines."),
            "message": {"type": "string", "description": "For people."},
        }),
        &["code", "message"],
        "What went wrong.",
    )
}

// Schemas.

#[tokio::test]
async fn every_schema_is_a_valid_draft_2020_12_schema() {
    let shapes = shapes();
    assert!(shapes.tools.len() > 20, "{} tools", shapes.tools.len());
    for tool in &shapes.tools {
        let input = input_schema(&shapes, &tool.name);
        validator(&input);
        assert_eq!(input["type"], "object", "{}", tool.name);
        assert_eq!(input["additionalProperties"], false, "{}", tool.name);
        if let Some(output) = output_schema(&shapes, &tool.name) {
            validator(&output);
            assert_eq!(output["type"], "object", "{}", tool.name);
        }
    }
}

#[tokio::test]
async fn integers_have_the_exact_range_of_their_type() {
    let shapes = shapes();
    let expected = [
        ("a", json!(0), json!(255)),
        ("b", json!(-128), json!(127)),
        ("c", json!(0), json!(65535)),
        ("d", json!(-32768), json!(32767)),
        ("e", json!(0), json!(4294967295u32)),
        ("f", json!(-2147483648), json!(2147483647)),
        ("g", json!(0), json!(u64::MAX)),
        ("h", json!(i64::MIN), json!(i64::MAX)),
    ];
    let input = input_schema(&shapes, "shapes_integers");
    for (name, min, max) in expected {
        let mut schema = input["properties"][name].clone();
        if let Some(object) = schema.as_object_mut() {
            object.remove("description");
        }
        assert_eq!(schema, integer(min, max), "parameter {name}");
    }
    assert_eq!(
        input["required"],
        json!(["a", "b", "c", "d", "e", "f", "g", "h"])
    );
    // 64-bit bounds are written out exactly, not rounded through a double.
    let text = serde_json::to_string(&input).unwrap();
    assert!(text.contains(r#""maximum":18446744073709551615"#), "{text}");
    assert!(text.contains(r#""minimum":-9223372036854775808"#), "{text}");
    assert!(text.contains(r#""maximum":9223372036854775807"#), "{text}");
}

#[tokio::test]
async fn scalar_schemas() {
    let shapes = shapes();
    assert_eq!(
        param(&shapes, "shapes_negate", "b"),
        json!({"type": "boolean", "description": "a truth value."})
    );
    assert_eq!(
        param(&shapes, "shapes_floats", "single"),
        json!({
            "type": "number",
            "minimum": -f64::from(f32::MAX),
            "maximum": f64::from(f32::MAX),
            "description": "32 bits.",
        })
    );
    assert_eq!(
        param(&shapes, "shapes_floats", "double"),
        json!({"type": "number", "description": "64 bits."})
    );
    assert_eq!(
        param(&shapes, "shapes_character", "c"),
        json!({"type": "string", "minLength": 1, "maxLength": 1, "description": "one character."})
    );
    assert_eq!(
        param(&shapes, "shapes_text", "s"),
        json!({"type": "string"})
    );
}

#[tokio::test]
async fn list_and_tuple_schemas() {
    let shapes = shapes();
    assert_eq!(
        param(&shapes, "shapes_echo_list", "items"),
        json!({"type": "array", "items": {"type": "string"}})
    );
    assert_eq!(
        param(&shapes, "shapes_echo_bytes", "data"),
        json!({"type": "array", "items": integer(json!(0), json!(255)), "description": "raw bytes."})
    );
    assert_eq!(
        param(&shapes, "shapes_echo_grid", "grid"),
        json!({
            "type": "array",
            "items": {"type": "array", "items": integer(json!(i32::MIN), json!(i32::MAX))},
        })
    );
    assert_eq!(
        param(&shapes, "shapes_echo_tuple", "t"),
        json!({
            "type": "array",
            "prefixItems": [{"type": "string"}, integer(json!(0), json!(u32::MAX)), {"type": "boolean"}],
            "items": false,
            "minItems": 3,
            "maxItems": 3,
        })
    );
}

#[tokio::test]
async fn record_schemas_are_closed_and_require_all_but_options() {
    let shapes = shapes();
    assert_eq!(param(&shapes, "shapes_echo_person", "p"), person_schema());
    // A parameter's own line in the function's comment wins over its type's comment.
    assert_eq!(
        param(&shapes, "shapes_echo_point", "p"),
        with_description(point_schema(), "the point to send back.")
    );
    let inner = object(
        json!({"e": {
            "type": "array",
            "items": integer(json!(-32768), json!(32767)),
            "description": "Some signed numbers.",
        }}),
        &["e"],
        "The innermost layer.",
    );
    let middle = object(
        json!({
            "c": with_description(integer(json!(0), json!(255)), "A small number."),
            "d": with_description(nullable(inner), "The innermost layer, if there is one."),
        }),
        &["c"],
        "A middle layer.",
    );
    let outer = object(
        json!({"b": {"type": "array", "items": middle, "description": "The middle layers."}}),
        &["b"],
        "The outer layer of a nest.",
    );
    assert_eq!(param(&shapes, "shapes_echo_nest", "a"), outer);
}

fn point_ref() -> Value {
    json!({"$ref": "#/$defs/point"})
}

#[tokio::test]
async fn variant_schema_is_one_of_tagged_objects() {
    let shapes = shapes();
    let case = |tag: &str, value: Option<Value>, description: &str| {
        let mut properties = json!({"tag": {"const": tag}});
        let mut required = vec!["tag"];
        if let Some(value) = value {
            properties["value"] = value;
            required.push("value");
        }
        object(properties, &required, description)
    };
    let expected = json!({
        "oneOf": [
            case("circle", Some(json!({"type": "number"})), "A circle of this radius."),
            case(
                "rectangle",
                Some(json!({
                    "type": "array",
                    "prefixItems": [point_ref(), point_ref()],
                    "items": false,
                    "minItems": 2,
                    "maxItems": 2,
                })),
                "A rectangle between two opposite corners.",
            ),
            case(
                "path",
                Some(json!({"type": "array", "items": point_ref()})),
                "A path through these points.",
            ),
            case("empty", None, "Nothing to draw."),
        ],
        "description": "the shape to send back.",
    });
    assert_eq!(param(&shapes, "shapes_echo_shape", "s"), expected);
    // `point` is used three times: written once, in `$defs`.
    let schema = input_schema(&shapes, "shapes_echo_shape");
    assert_eq!(schema["$defs"]["point"], point_schema());
    assert_eq!(
        schema["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
}

#[tokio::test]
async fn enum_and_flags_schemas() {
    let shapes = shapes();
    assert_eq!(
        param(&shapes, "shapes_echo_color", "c"),
        with_description(color_schema(), "a colour.")
    );
    assert_eq!(
        param(&shapes, "shapes_echo_permissions", "p"),
        json!({
            "type": "array",
            "items": {"enum": ["read", "write", "execute"]},
            "uniqueItems": true,
            "description": "What a file allows.",
        })
    );
}

#[tokio::test]
async fn option_schemas_allow_null_and_absence() {
    let shapes = shapes();
    let input = input_schema(&shapes, "shapes_echo_option");
    assert_eq!(
        input["properties"]["o"],
        with_description(nullable(point_schema()), "a point, or nothing.")
    );
    assert_eq!(input["required"], json!([]));
    // Two levels of option stay apart: `null` is the outer none, `{"some": null}` the inner one.
    let input = input_schema(&shapes, "shapes_echo_option_option");
    assert_eq!(
        input["properties"]["o"],
        json!({"oneOf": [
            {"type": "null"},
            {
                "type": "object",
                "properties": {"some": nullable(integer(json!(0), json!(u32::MAX)))},
                "required": ["some"],
                "additionalProperties": false,
            },
        ]})
    );
    assert_eq!(input["required"], json!([]));
}

#[tokio::test]
async fn result_schemas() {
    let shapes = shapes();
    assert_eq!(
        param(&shapes, "shapes_echo_result", "r"),
        json!({"oneOf": [
            arm("ok", integer(json!(0), json!(u32::MAX))),
            arm("err", json!({"type": "string"})),
        ]})
    );
    let job = object(
        json!({
            "id": integer(json!(0), json!(u32::MAX)),
            "outcome": {
                "oneOf": [arm("ok", json!({"type": "string"})), arm("err", problem_schema())],
                "description": "The output, or why there is none.",
            },
            "cleanup": {
                "oneOf": [arm("ok", json!({"type": "null"})), arm("err", json!({"type": "string"}))],
                "description": "Whether cleaning up worked.",
            },
            "cached": {
                "oneOf": [arm("ok", json!({"type": "null"})), arm("err", json!({"type": "null"}))],
                "description": "Whether the output came from a cache.",
            },
        }),
        &["id", "outcome", "cleanup", "cached"],
        "A unit of work and how it went: results inside a record.",
    );
    assert_eq!(param(&shapes, "shapes_echo_job", "j"), job);
}

#[tokio::test]
async fn a_function_without_parameters_takes_an_empty_object() {
    let shapes = shapes();
    let empty =
        json!({"type": "object", "properties": {}, "required": [], "additionalProperties": false});
    assert_eq!(input_schema(&shapes, "shapes_noop"), empty);
    assert_eq!(input_schema(&shapes, "shapes_ping"), empty);
}

// Output schemas.

/// `schema` as an output schema gives it: without its descriptions.
fn undocumented(mut schema: Value) -> Value {
    fn strip(value: &mut Value) {
        match value {
            Value::Object(object) => {
                if object.get("description").is_some_and(Value::is_string) {
                    object.remove("description");
                }
                for (key, value) in object.iter_mut() {
                    match (key.as_str(), value) {
                        ("properties" | "$defs", Value::Object(map)) => {
                            map.values_mut().for_each(strip)
                        }
                        (_, value) => strip(value),
                    }
                }
            }
            Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    strip(&mut schema);
    schema
}

#[tokio::test]
async fn a_returned_record_is_the_output_schema_itself() {
    let shapes = shapes();
    assert_eq!(
        output_schema(&shapes, "shapes_echo_person"),
        Some(undocumented(person_schema()))
    );
    assert_eq!(
        output_schema(&shapes, "shapes_echo_point"),
        Some(undocumented(point_schema()))
    );
    // The `ok` record of a result too.
    assert_eq!(
        output_schema(&shapes, "shapes_lookup"),
        Some(undocumented(person_schema()))
    );
    // The exact shape, without the comments.
    let integers = output_schema(&shapes, "shapes_integers").unwrap();
    assert_eq!(integers.get("description"), None);
    assert_eq!(integers["properties"]["a"].get("description"), None);
    assert_eq!(integers["properties"]["g"]["maximum"], json!(u64::MAX));
    assert_eq!(integers["properties"]["h"]["minimum"], json!(i64::MIN));
}

#[tokio::test]
async fn other_returned_types_are_wrapped_as_value() {
    let shapes = shapes();
    let wrapped = |schema: Value| {
        json!({
            "type": "object",
            "properties": {"value": schema},
            "required": ["value"],
            "additionalProperties": false,
        })
    };
    // A string is text alone: no structured content to describe.
    assert_eq!(output_schema(&shapes, "shapes_text"), None);
    let cases = [
        ("shapes_negate", json!({"type": "boolean"})),
        ("shapes_unsigned", integer(json!(0), json!(u64::MAX))),
        ("shapes_echo_color", color_schema()),
        ("shapes_echo_option", nullable(point_schema())),
        (
            "shapes_echo_list",
            json!({"type": "array", "items": {"type": "string"}}),
        ),
        // The `ok` type of a result.
        ("shapes_echo_result", integer(json!(0), json!(u32::MAX))),
    ];
    for (name, schema) in cases {
        assert_eq!(
            output_schema(&shapes, name),
            Some(undocumented(wrapped(schema))),
            "{name}"
        );
    }
    let tuple = output_schema(&shapes, "shapes_floats").unwrap();
    assert_eq!(
        tuple["properties"]["value"]["prefixItems"][1],
        json!({"type": "number"})
    );
    // The output schema gives the shape without the comments the input schema carries.
    let shape = output_schema(&shapes, "shapes_echo_shape").unwrap();
    assert_eq!(shape["properties"]["value"].get("description"), None);
    assert_eq!(
        param(&shapes, "shapes_echo_shape", "s")["description"],
        "the shape to send back."
    );
}

#[tokio::test]
async fn nothing_errors_and_content_have_no_output_schema() {
    let shapes = shapes();
    for name in [
        "shapes_noop",
        "shapes_check",
        "shapes_validate",
        "shapes_render",
        "shapes_badge",
        "shapes_render_or_fail",
    ] {
        assert_eq!(output_schema(&shapes, name), None, "{name}");
    }
}

// Round trips.

#[tokio::test]
async fn scalars_round_trip() {
    let shapes = shapes();
    assert_eq!(
        returns(&shapes, "shapes_negate", json!({"b": true})).await,
        json!({"value": false})
    );
    for s in [
        "",
        "plain",
        "héllo ✓ 字 😀",
        "line\nbreak \"quoted\" \\ \u{0}",
    ] {
        round_trip(&shapes, "shapes_text", "s", json!(s)).await;
    }
    for c in ["a", "é", "字", "😀", "\u{0}", "\n"] {
        round_trip(&shapes, "shapes_character", "c", json!(c)).await;
    }
    for n in [0.0, -1.5, 1e300, f64::MIN_POSITIVE, f64::MAX, -f64::MAX] {
        let back = returns(
            &shapes,
            "shapes_floats",
            json!({"single": 0.5, "double": n}),
        )
        .await;
        assert_eq!(back, json!({"value": [0.5, n]}));
    }
    // The extremes of f32 pass exactly.
    for n in [f64::from(f32::MAX), -f64::from(f32::MAX), 1.25, 0.0] {
        let back = returns(&shapes, "shapes_floats", json!({"single": n, "double": 0})).await;
        assert_eq!(back["value"][0], json!(n));
    }
    // A value f32 cannot hold comes back as the nearest f32, written out in full (0.1 as
    // 0.10000000149011612), and that comes back unchanged.
    let back = returns(
        &shapes,
        "shapes_floats",
        json!({"single": 0.1, "double": 0.1}),
    )
    .await;
    assert_eq!(back, json!({"value": [f64::from(0.1f32), 0.1]}));
    let again = returns(
        &shapes,
        "shapes_floats",
        json!({"single": back["value"][0], "double": 0}),
    )
    .await;
    assert_eq!(again["value"][0], back["value"][0]);
}

#[tokio::test]
async fn integer_extremes_round_trip_exactly() {
    let shapes = shapes();
    let extremes = [
        json!({"a": 0, "b": -128, "c": 0, "d": -32768, "e": 0, "f": i32::MIN, "g": 0, "h": i64::MIN}),
        json!({
            "a": 255, "b": 127, "c": 65535, "d": 32767, "e": u32::MAX, "f": i32::MAX,
            "g": u64::MAX, "h": i64::MAX,
        }),
    ];
    for args in extremes {
        let result = call(&shapes, "shapes_integers", args.clone()).await;
        assert_eq!(result.structured_content, Some(args.clone()));
        // The text content is the same JSON, digits and all.
        let text: Value = serde_json::from_str(moat_tests::text(&result)).unwrap();
        assert_eq!(text, args);
    }

    let result = call(&shapes, "shapes_unsigned", json!({"n": u64::MAX})).await;
    assert_eq!(moat_tests::text(&result), "18446744073709551615");
    assert_eq!(
        result.structured_content.unwrap()["value"].as_u64(),
        Some(u64::MAX)
    );
    let result = call(&shapes, "shapes_signed", json!({"n": i64::MIN})).await;
    assert_eq!(moat_tests::text(&result), "-9223372036854775808");
    assert_eq!(
        result.structured_content.unwrap()["value"].as_i64(),
        Some(i64::MIN)
    );
    // Neighbours of the 2^53 limit of doubles, which a float conversion would blur.
    for n in [9007199254740993u64, u64::MAX - 1] {
        round_trip(&shapes, "shapes_unsigned", "n", json!(n)).await;
        round_trip(&shapes, "shapes_echo_user", "id", json!(n)).await;
    }
    round_trip(&shapes, "shapes_signed", "n", json!(-9007199254740993i64)).await;
}

#[tokio::test]
async fn integral_numbers_written_as_floats_are_integers() {
    let shapes = shapes();
    // JSON Schema counts 3.0 as an integer, and so does moat.
    let args =
        json!({"a": 3.0, "b": -1.0, "c": 1e2, "d": 0.0, "e": 3.0, "f": -0.0, "g": 4.0, "h": -5.0});
    let back = returns(&shapes, "shapes_integers", args).await;
    assert_eq!(
        back,
        json!({"a": 3, "b": -1, "c": 100, "d": 0, "e": 3, "f": 0, "g": 4, "h": -5})
    );
    // Up to the last integer a double holds exactly.
    assert_eq!(
        returns(&shapes, "shapes_unsigned", json!({"n": 9007199254740991.0})).await,
        json!({"value": 9007199254740991u64})
    );
    assert_eq!(
        returns(&shapes, "shapes_signed", json!({"n": -9007199254740991.0})).await,
        json!({"value": -9007199254740991i64})
    );
}

#[tokio::test]
async fn lists_and_tuples_round_trip() {
    let shapes = shapes();
    round_trip(&shapes, "shapes_echo_list", "items", json!([])).await;
    round_trip(&shapes, "shapes_echo_list", "items", json!(["a", "", "字"])).await;
    round_trip(&shapes, "shapes_echo_bytes", "data", json!([])).await;
    round_trip(
        &shapes,
        "shapes_echo_bytes",
        "data",
        json!([0, 1, 127, 128, 255]),
    )
    .await;
    round_trip(&shapes, "shapes_echo_grid", "grid", json!([])).await;
    round_trip(
        &shapes,
        "shapes_echo_grid",
        "grid",
        json!([[], [i32::MIN], [1, 2, i32::MAX]]),
    )
    .await;
    round_trip(
        &shapes,
        "shapes_echo_tuple",
        "t",
        json!(["x", u32::MAX, true]),
    )
    .await;
    round_trip(&shapes, "shapes_echo_tuple", "t", json!(["", 0, false])).await;
}

#[tokio::test]
async fn records_round_trip() {
    let shapes = shapes();
    let point = json!({"x": 1.5, "y": -2.0});
    assert_eq!(
        returns(&shapes, "shapes_echo_point", json!({"p": point})).await,
        point
    );

    let full = json!({"name": "Zoë", "age": 255, "favourite": "blue", "tags": ["a", "b"]});
    assert_eq!(
        returns(&shapes, "shapes_echo_person", json!({"p": full})).await,
        full
    );
    // Absent and null options are both none, and come back as null.
    let expected = json!({"name": "Al", "age": null, "favourite": null, "tags": []});
    let sparse = json!({"name": "Al", "tags": []});
    assert_eq!(
        returns(&shapes, "shapes_echo_person", json!({"p": sparse})).await,
        expected
    );
    let nulls = json!({"name": "Al", "age": null, "favourite": null, "tags": []});
    assert_eq!(
        returns(&shapes, "shapes_echo_person", json!({"p": nulls})).await,
        expected
    );

    let nest = json!({"b": [
        {"c": 0, "d": null},
        {"c": 255, "d": {"e": []}},
        {"c": 7, "d": {"e": [-32768, 0, 32767]}},
    ]});
    assert_eq!(
        returns(&shapes, "shapes_echo_nest", json!({"a": nest})).await,
        nest
    );
    let empty = json!({"b": []});
    assert_eq!(
        returns(&shapes, "shapes_echo_nest", json!({"a": empty})).await,
        empty
    );
}

#[tokio::test]
async fn variants_enums_and_flags_round_trip() {
    let shapes = shapes();
    let cases = [
        json!({"tag": "circle", "value": 2.5}),
        json!({"tag": "rectangle", "value": [{"x": 0.0, "y": 0.0}, {"x": 3.0, "y": 4.0}]}),
        json!({"tag": "path", "value": []}),
        json!({"tag": "path", "value": [{"x": 1.0, "y": 1.0}]}),
        json!({"tag": "empty"}),
    ];
    for shape in cases {
        round_trip(&shapes, "shapes_echo_shape", "s", shape).await;
    }
    for color in ["red", "green", "blue"] {
        round_trip(&shapes, "shapes_echo_color", "c", json!(color)).await;
    }
    round_trip(&shapes, "shapes_echo_permissions", "p", json!([])).await;
    round_trip(
        &shapes,
        "shapes_echo_permissions",
        "p",
        json!(["read", "write", "execute"]),
    )
    .await;
    // Flags come back in declaration order, whatever order they went in.
    assert_eq!(
        returns(
            &shapes,
            "shapes_echo_permissions",
            json!({"p": ["execute", "read"]})
        )
        .await,
        json!({"value": ["read", "execute"]})
    );
}

#[tokio::test]
async fn options_round_trip() {
    let shapes = shapes();
    round_trip(&shapes, "shapes_echo_option", "o", json!(null)).await;
    round_trip(
        &shapes,
        "shapes_echo_option",
        "o",
        json!({"x": 0.0, "y": 1.0}),
    )
    .await;
    assert_eq!(
        returns(&shapes, "shapes_echo_option", json!({})).await,
        json!({"value": null})
    );
    for o in [
        json!(null),
        json!({"some": null}),
        json!({"some": 0}),
        json!({"some": u32::MAX}),
    ] {
        round_trip(&shapes, "shapes_echo_option_option", "o", o).await;
    }
    assert_eq!(
        returns(&shapes, "shapes_echo_option_option", json!({})).await,
        json!({"value": null})
    );
}

#[tokio::test]
async fn results_inside_records_round_trip() {
    let shapes = shapes();
    let jobs = [
        json!({"id": 1, "outcome": {"ok": "done"}, "cleanup": {"ok": null}, "cached": {"ok": null}}),
        json!({
            "id": u32::MAX,
            "outcome": {"err": {"code": 500, "message": "broke"}},
            "cleanup": {"err": "disk full"},
            "cached": {"err": null},
        }),
    ];
    for job in jobs {
        assert_eq!(
            returns(&shapes, "shapes_echo_job", json!({"j": job})).await,
            job
        );
    }
}

#[tokio::test]
async fn result_ok_is_the_output_and_err_is_a_tool_error() {
    let shapes = shapes();
    assert_eq!(
        returns(&shapes, "shapes_echo_result", json!({"r": {"ok": 5}})).await,
        json!({"value": 5})
    );
    let failed = call(&shapes, "shapes_echo_result", json!({"r": {"err": "boom"}})).await;
    assert_eq!(failed.is_error, Some(true));
    assert_eq!(failed.structured_content, None);
    assert_eq!(content(&failed), json!([{"type": "text", "text": "boom"}]));

    // result<record, string>
    let found = returns(&shapes, "shapes_lookup", json!({"id": 7})).await;
    assert_eq!(
        found,
        json!({"name": "person 7", "age": null, "favourite": "green", "tags": ["found"]})
    );
    let missing = call(&shapes, "shapes_lookup", json!({"id": 0})).await;
    assert_eq!(missing.is_error, Some(true));
    assert_eq!(missing.structured_content, None);
    assert_eq!(moat_tests::text(&missing), "there is no person 0");
}

#[tokio::test]
async fn result_without_ok_type() {
    let shapes = shapes();
    let ok = call(&shapes, "shapes_check", json!({"value": 1})).await;
    assert_eq!(ok.is_error, Some(false));
    assert_eq!(ok.structured_content, None);
    assert_eq!(content(&ok), json!([]));

    let err = call(&shapes, "shapes_check", json!({"value": -1})).await;
    assert_eq!(err.is_error, Some(true));
    assert_eq!(
        content(&err),
        json!([{"type": "text", "text": "-1 is negative"}])
    );

    // An error that is not a string is written as JSON.
    let err = call(&shapes, "shapes_validate", json!({"value": -2})).await;
    assert_eq!(err.is_error, Some(true));
    let problem: Value = serde_json::from_str(moat_tests::text(&err)).unwrap();
    assert_eq!(problem, json!({"code": 422, "message": "-2 is negative"}));
    let ok = call(&shapes, "shapes_validate", json!({"value": 0})).await;
    assert_eq!(ok.is_error, Some(false));
}

#[tokio::test]
async fn a_function_returning_nothing() {
    let shapes = shapes();
    let result = call(&shapes, "shapes_noop", json!({})).await;
    assert_eq!(result.is_error, Some(false));
    assert_eq!(result.structured_content, None);
    assert_eq!(content(&result), json!([]));
}

#[tokio::test]
async fn a_float_json_cannot_carry_fails_the_call_cleanly() {
    let shapes = shapes();
    assert_eq!(
        returns(&shapes, "shapes_ratio", json!({"a": 1, "b": 4})).await,
        json!({"value": 0.25})
    );
    for (a, b) in [(1, 0), (0, 0)] {
        let error = run(&shapes, "shapes_ratio", json!({"a": a, "b": b}))
            .await
            .unwrap_err();
        assert!(
            error.starts_with("the tool returned an unusable result: result: ")
                && error.ends_with("cannot be written as JSON"),
            "{error}"
        );
    }
}

#[tokio::test]
async fn content_blocks() {
    let shapes = shapes();
    let rendered = call(&shapes, "shapes_render", json!({"caption": "three blocks"})).await;
    assert_eq!(rendered.is_error, Some(false));
    assert_eq!(rendered.structured_content, None);
    assert_eq!(
        content(&rendered),
        json!([
            {"type": "text", "text": "three blocks"},
            // 89 50 4e 47 00 ff, in base64.
            {"type": "image", "data": "iVBORwD/", "mimeType": "image/png"},
            {
                "type": "resource_link",
                "uri": "file:///shapes/readme.md",
                "name": "readme",
                "description": "What the shapes are",
            },
        ])
    );

    let badge = call(&shapes, "shapes_badge", json!({"label": "new"})).await;
    assert_eq!(content(&badge), json!([{"type": "text", "text": "[new]"}]));

    // Content as the `ok` of a result.
    let ok = call(&shapes, "shapes_render_or_fail", json!({"fail": false})).await;
    assert_eq!(ok.is_error, Some(false));
    assert_eq!(content(&ok)[0], json!({"type": "text", "text": "rendered"}));
    assert_eq!(content(&ok).as_array().unwrap().len(), 3);
    let failed = call(&shapes, "shapes_render_or_fail", json!({"fail": true})).await;
    assert_eq!(failed.is_error, Some(true));
    assert_eq!(
        content(&failed),
        json!([{"type": "text", "text": "asked to fail"}])
    );
}

// Validation errors.

#[tokio::test]
async fn every_invalid_argument_is_named_precisely() {
    let shapes = shapes();
    let integers = json!({"a": 0, "b": 0, "c": 0, "d": 0, "e": 0, "f": 0, "g": 0, "h": 0});
    let with = |key: &str, value: Value| {
        let mut args = integers.clone();
        args[key] = value;
        args
    };
    let point = json!({"x": 0, "y": 0});
    let cases: Vec<(&str, Value, &str)> = vec![
        // Wrong types.
        ("shapes_text", json!({"s": 5}), "s: expected string, got 5"),
        (
            "shapes_text",
            json!({"s": null}),
            "s: expected string, got null",
        ),
        (
            "shapes_text",
            json!({"s": ["a"]}),
            "s: expected string, got an array",
        ),
        (
            "shapes_negate",
            json!({"b": "yes"}),
            r#"b: expected boolean, got "yes""#,
        ),
        (
            "shapes_negate",
            json!({"b": 1}),
            "b: expected boolean, got 1",
        ),
        (
            "shapes_echo_point",
            json!({"p": []}),
            "p: expected object, got an array",
        ),
        (
            "shapes_echo_list",
            json!({"items": "a"}),
            r#"items: expected array, got "a""#,
        ),
        (
            "shapes_echo_list",
            json!({"items": ["a", 1]}),
            "items[1]: expected string, got 1",
        ),
        (
            "shapes_floats",
            json!({"single": 0, "double": "x"}),
            r#"double: expected number, got "x""#,
        ),
        // Missing values.
        ("shapes_negate", json!({}), "b: missing required value"),
        (
            "shapes_echo_person",
            json!({"p": {"tags": []}}),
            "p.name: missing required value",
        ),
        (
            "shapes_echo_point",
            json!({"p": {"x": 1}}),
            "p.y: missing required value",
        ),
        // Unknown fields.
        (
            "shapes_echo_point",
            json!({"p": {"x": 1, "y": 2, "z": 3}}),
            r#"p: unknown field "z" (expected: x, y)"#,
        ),
        (
            "shapes_echo_point",
            json!({"p": point, "q": 1}),
            r#"arguments: unknown field "q" (expected: p)"#,
        ),
        (
            "shapes_noop",
            json!({"x": 1}),
            r#"arguments: unknown field "x" (expected: none)"#,
        ),
        // Integers out of range, or not integers.
        (
            "shapes_integers",
            with("e", json!(-1)),
            "e: expected integer 0..=4294967295, got -1",
        ),
        (
            "shapes_integers",
            with("e", json!(4294967296u64)),
            "e: expected integer 0..=4294967295, got 4294967296",
        ),
        (
            "shapes_integers",
            with("a", json!(256)),
            "a: expected integer 0..=255, got 256",
        ),
        (
            "shapes_integers",
            with("b", json!(-129)),
            "b: expected integer -128..=127, got -129",
        ),
        (
            "shapes_integers",
            with("c", json!(65536)),
            "c: expected integer 0..=65535, got 65536",
        ),
        (
            "shapes_integers",
            with("d", json!(32768)),
            "d: expected integer -32768..=32767, got 32768",
        ),
        (
            "shapes_integers",
            with("f", json!(2147483648u32)),
            "f: expected integer -2147483648..=2147483647, got 2147483648",
        ),
        (
            "shapes_integers",
            with("g", json!(-1)),
            "g: expected integer 0..=18446744073709551615, got -1",
        ),
        (
            "shapes_integers",
            with("h", json!(u64::MAX)),
            "h: expected integer -9223372036854775808..=9223372036854775807, got 18446744073709551615",
        ),
        (
            "shapes_integers",
            with("e", json!(2.5)),
            "e: expected integer 0..=4294967295, got 2.5",
        ),
        (
            "shapes_integers",
            with("e", json!("1")),
            r#"e: expected integer 0..=4294967295, got "1""#,
        ),
        (
            "shapes_integers",
            with("e", json!(null)),
            "e: expected integer 0..=4294967295, got null",
        ),
        (
            "shapes_unsigned",
            json!({"n": 0.5}),
            "n: expected integer 0..=18446744073709551615, got 0.5",
        ),
        (
            "shapes_echo_user",
            json!({"id": -5}),
            "id: expected integer 0..=18446744073709551615, got -5",
        ),
        // Floats.
        (
            "shapes_floats",
            json!({"single": 1e39, "double": 0}),
            "single: expected number within the range of f32, got 1e+39",
        ),
        (
            "shapes_floats",
            json!({"single": -3.5e38, "double": 0}),
            "single: expected number within the range of f32, got -3.5e+38",
        ),
        // Characters.
        (
            "shapes_character",
            json!({"c": "ab"}),
            r#"c: expected a string of one character, got "ab""#,
        ),
        (
            "shapes_character",
            json!({"c": ""}),
            r#"c: expected a string of one character, got """#,
        ),
        (
            "shapes_character",
            json!({"c": "e\u{301}"}),
            "c: expected a string of one character, got \"e\u{301}\"",
        ),
        (
            "shapes_character",
            json!({"c": 65}),
            "c: expected a string of one character, got 65",
        ),
        // Enums and flags.
        (
            "shapes_echo_color",
            json!({"c": "purple"}),
            r#"c: expected one of "red", "green", "blue", got "purple""#,
        ),
        (
            "shapes_echo_color",
            json!({"c": "Red"}),
            r#"c: expected one of "red", "green", "blue", got "Red""#,
        ),
        (
            "shapes_echo_permissions",
            json!({"p": ["read", "read"]}),
            r#"p[1]: flag "read" given twice"#,
        ),
        (
            "shapes_echo_permissions",
            json!({"p": ["write", "delete"]}),
            r#"p[1]: expected one of "read", "write", "execute", got "delete""#,
        ),
        (
            "shapes_echo_permissions",
            json!({"p": "read"}),
            r#"p: expected array of flag names, got "read""#,
        ),
        // Tuples.
        (
            "shapes_echo_tuple",
            json!({"t": ["a", 1]}),
            "t: expected array of 3 items, got an array",
        ),
        (
            "shapes_echo_tuple",
            json!({"t": ["a", 1, true, 2]}),
            "t: expected array of 3 items, got an array",
        ),
        (
            "shapes_echo_tuple",
            json!({"t": ["a", -1, true]}),
            "t[1]: expected integer 0..=4294967295, got -1",
        ),
        (
            "shapes_echo_tuple",
            json!({"t": {"0": "a"}}),
            "t: expected array of 3 items, got an object",
        ),
        // Variants.
        (
            "shapes_echo_shape",
            json!({"s": {"tag": "square"}}),
            r#"s.tag: expected one of "circle", "rectangle", "path", "empty", got "square""#,
        ),
        (
            "shapes_echo_shape",
            json!({"s": {"value": 1}}),
            r#"s.tag: expected one of "circle", "rectangle", "path", "empty", got null"#,
        ),
        (
            "shapes_echo_shape",
            json!({"s": {"tag": "circle"}}),
            r#"s.value: case "circle" needs a value"#,
        ),
        (
            "shapes_echo_shape",
            json!({"s": {"tag": "empty", "value": null}}),
            r#"s.value: case "empty" takes no value"#,
        ),
        (
            "shapes_echo_shape",
            json!({"s": {"tag": "circle", "value": "big"}}),
            r#"s.value: expected number, got "big""#,
        ),
        (
            "shapes_echo_shape",
            json!({"s": {"tag": "circle", "value": 1, "size": 2}}),
            r#"s: unknown field "size" (expected: tag, value)"#,
        ),
        (
            "shapes_echo_shape",
            json!({"s": "circle"}),
            r#"s: expected object {"tag": one of "circle", "rectangle", "path", "empty", "value": …}, got "circle""#,
        ),
        (
            "shapes_echo_shape",
            json!({"s": {"tag": "rectangle", "value": [point, {"x": 1}]}}),
            "s.value[1].y: missing required value",
        ),
        (
            "shapes_echo_shape",
            json!({"s": {"tag": "path", "value": [point, point, {"x": 1, "y": true}]}}),
            "s.value[2].y: expected number, got true",
        ),
        // Options.
        (
            "shapes_echo_option",
            json!({"o": 5}),
            "o: expected object, got 5",
        ),
        (
            "shapes_echo_option_option",
            json!({"o": 5}),
            r#"o: expected null or {"some": …}, got 5"#,
        ),
        (
            "shapes_echo_option_option",
            json!({"o": {"some": 1, "none": 2}}),
            r#"o: expected null or {"some": …}, got an object"#,
        ),
        (
            "shapes_echo_option_option",
            json!({"o": {"some": "x"}}),
            r#"o.some: expected integer 0..=4294967295, got "x""#,
        ),
        (
            "shapes_echo_person",
            json!({"p": {"name": "a", "tags": [], "age": 256}}),
            "p.age: expected integer 0..=255, got 256",
        ),
        (
            "shapes_echo_person",
            json!({"p": {"name": "a", "tags": [], "favourite": "pink"}}),
            r#"p.favourite: expected one of "red", "green", "blue", got "pink""#,
        ),
        // Results.
        (
            "shapes_echo_result",
            json!({"r": {"ok": 1, "err": "x"}}),
            r#"r: expected {"ok": …} or {"err": …}, got an object"#,
        ),
        (
            "shapes_echo_result",
            json!({"r": {"fine": 1}}),
            r#"r: expected {"ok": …} or {"err": …}, got an object"#,
        ),
        (
            "shapes_echo_result",
            json!({"r": 1}),
            r#"r: expected {"ok": …} or {"err": …}, got 1"#,
        ),
        (
            "shapes_echo_result",
            json!({"r": {"ok": "x"}}),
            r#"r.ok: expected integer 0..=4294967295, got "x""#,
        ),
        (
            "shapes_echo_result",
            json!({"r": {"err": 1}}),
            "r.err: expected string, got 1",
        ),
        (
            "shapes_echo_job",
            json!({"j": {"id": 1, "outcome": {"ok": ""}, "cleanup": {"ok": 1}, "cached": {"ok": null}}}),
            "j.cleanup.ok: expected null, got 1",
        ),
        (
            "shapes_echo_job",
            json!({"j": {"id": 1, "outcome": {"err": {"code": 1}}, "cleanup": {"ok": null}, "cached": {"ok": null}}}),
            "j.outcome.err.message: missing required value",
        ),
        (
            "shapes_echo_job",
            json!({"j": {"id": 1, "outcome": {"ok": ""}, "cleanup": {"ok": null}, "cached": {"err": false}}}),
            "j.cached.err: expected null, got false",
        ),
        (
            "shapes_echo_job",
            json!({"j": {"id": 1, "outcome": {"ok": ""}, "cleanup": {"ok": null}}}),
            "j.cached: missing required value",
        ),
        // Nested paths.
        (
            "shapes_echo_nest",
            json!({"a": {"b": [{"c": 1}, {"c": 2}, {"c": 300}]}}),
            "a.b[2].c: expected integer 0..=255, got 300",
        ),
        (
            "shapes_echo_nest",
            json!({"a": {"b": [{"c": 1, "d": {"e": [0, 40000]}}]}}),
            "a.b[0].d.e[1]: expected integer -32768..=32767, got 40000",
        ),
        (
            "shapes_echo_nest",
            json!({"a": {"b": [{"c": 1, "d": {"e": [], "f": 1}}]}}),
            r#"a.b[0].d: unknown field "f" (expected: e)"#,
        ),
        (
            "shapes_echo_grid",
            json!({"grid": [[1], [2, "x"]]}),
            r#"grid[1][1]: expected integer -2147483648..=2147483647, got "x""#,
        ),
        (
            "shapes_echo_bytes",
            json!({"data": [0, 256]}),
            "data[1]: expected integer 0..=255, got 256",
        ),
    ];
    for (name, args, expected) in cases {
        assert_eq!(
            rejects(&shapes, name, args.clone()).await,
            expected,
            "{name} with {args}"
        );
    }
    // A long value is cut short in the message.
    let long = "x".repeat(50);
    assert_eq!(
        rejects(&shapes, "shapes_character", json!({"c": long})).await,
        format!(
            "c: expected a string of one character, got \"{}…\"",
            "x".repeat(40)
        )
    );
}

/// Numbers past what a double holds exactly, where moat is stricter than a schema can say: JSON
/// Schema judges the double a number was read as, moat refuses to guess what was written.
#[tokio::test]
async fn imprecise_big_integers_are_refused() {
    let shapes = shapes();
    let cases = [
        // 2^53 + 1 written as a float reads as 2^53.
        (
            "shapes_unsigned",
            "9007199254740993.0",
            "n: expected integer 0..=18446744073709551615, got 9007199254740992.0",
        ),
        (
            "shapes_unsigned",
            "9007199254740992.0",
            "n: expected integer 0..=18446744073709551615, got 9007199254740992.0",
        ),
        (
            "shapes_unsigned",
            "1e17",
            "n: expected integer 0..=18446744073709551615, got 1e+17",
        ),
        // Past the range of 64-bit integers, serde_json reads a double.
        (
            "shapes_unsigned",
            "18446744073709551616",
            "n: expected integer 0..=18446744073709551615, got 1.8446744073709552e+19",
        ),
        (
            "shapes_signed",
            "-9223372036854775809",
            "n: expected integer -9223372036854775808..=9223372036854775807, got -9.223372036854776e+18",
        ),
    ];
    for (name, literal, expected) in cases {
        let n: Value = serde_json::from_str(literal).unwrap();
        let error = try_call(&shapes, name, json!({"n": n})).await.unwrap_err();
        assert_eq!(
            error.strip_prefix("invalid arguments: "),
            Some(expected),
            "{literal}"
        );
    }
}

// Descriptions.

#[tokio::test]
async fn descriptions_come_from_doc_comments() {
    let shapes = shapes();
    assert_eq!(
        shapes.summary.as_deref(),
        Some(
            "Every WIT type shape, sent back as it came: moat's tests check schemas, conversions \
             and error messages against it."
        )
    );
    let description = |name: &str| tool(&shapes, name).description.clone();
    // The parameter lines leave the tool's description.
    assert_eq!(
        description("shapes_integers"),
        "Returns its arguments as one record."
    );
    assert_eq!(description("shapes_negate"), "Returns `b` negated.");
    assert_eq!(description("shapes_noop"), "Does nothing at all.");
    assert_eq!(
        description("shapes_echo_result"),
        "Returns `r` unchanged: an `err` makes the call fail."
    );
    assert_eq!(
        description("shapes_lookup"),
        "Finds the person with number `id`; there is no person 0."
    );
    assert_eq!(description("shapes_english_greet"), "Says hello.");
    assert_eq!(description("shapes_french_greet"), "Says bonjour.");
    assert_eq!(
        description("shapes_ping"),
        "Still a tool: the rest of the interface is unaffected."
    );

    // Parameters: `name: text`, `- name: text` and `` `name`: text `` lines.
    let param_description = |name: &str, param_name: &str| {
        param(&shapes, name, param_name)["description"]
            .as_str()
            .map(str::to_string)
    };
    assert_eq!(
        param_description("shapes_integers", "a").as_deref(),
        Some("an unsigned 8-bit integer.")
    );
    assert_eq!(
        param_description("shapes_integers", "h").as_deref(),
        Some("a signed 64-bit integer.")
    );
    assert_eq!(param_description("shapes_integers", "b"), None);
    assert_eq!(
        param_description("shapes_character", "c").as_deref(),
        Some("one character.")
    );
    assert_eq!(
        param_description("shapes_lookup", "id").as_deref(),
        Some("the person's number.")
    );
    assert_eq!(
        param_description("shapes_english_greet", "name").as_deref(),
        Some("who to greet.")
    );
    assert_eq!(
        param_description("shapes_french_greet", "name").as_deref(),
        Some("who to greet.")
    );
    // Without a line of its own, a parameter takes its type's comment, through an alias too.
    assert_eq!(
        param_description("shapes_echo_person", "p").as_deref(),
        Some("Someone, with what is known about them.")
    );
    assert_eq!(
        param_description("shapes_echo_user", "id").as_deref(),
        Some("The number of a user.")
    );
    assert_eq!(param_description("shapes_text", "s"), None);

    // Fields and cases.
    let person = param(&shapes, "shapes_echo_person", "p");
    assert_eq!(
        person["properties"]["name"]["description"],
        "What they are called."
    );
    assert_eq!(person["properties"]["favourite"].get("description"), None);
    let shape = param(&shapes, "shapes_echo_shape", "s");
    assert_eq!(shape["oneOf"][0]["description"], "A circle of this radius.");
    assert_eq!(shape["oneOf"][3]["description"], "Nothing to draw.");
}

// Naming and skipping.

#[tokio::test]
async fn functions_sharing_a_name_are_qualified_by_interface() {
    let shapes = shapes();
    let english = tool(&shapes, "shapes_english_greet");
    assert_eq!(english.export, "moat:shapes/english@0.1.0#greet");
    let french = tool(&shapes, "shapes_french_greet");
    assert_eq!(french.export, "french#greet");
    assert!(!shapes.tools.iter().any(|t| t.name == "shapes_greet"));
    // Unique names stay short, wherever the function is.
    assert_eq!(
        tool(&shapes, "shapes_ping").export,
        "moat:shapes/handles@0.1.0#ping"
    );
    assert_eq!(
        tool(&shapes, "shapes_echo_point").export,
        "moat:shapes/roundtrip@0.1.0#echo-point"
    );

    let hello = call(&shapes, "shapes_english_greet", json!({"name": "Ann"})).await;
    assert_eq!(moat_tests::text(&hello), "Hello, Ann!");
    let bonjour = call(&shapes, "shapes_french_greet", json!({"name": "Ann"})).await;
    assert_eq!(moat_tests::text(&bonjour), "Bonjour, Ann !");
}

#[tokio::test]
async fn functions_with_resources_are_skipped_and_the_rest_still_works() {
    let shapes = shapes();
    let mut skipped = shapes.skipped.clone();
    skipped.sort();
    let reason = "resource values have no JSON form".to_string();
    assert_eq!(
        skipped,
        vec![
            (
                "moat:shapes/handles@0.1.0#[constructor]counter".to_string(),
                reason.clone()
            ),
            (
                "moat:shapes/handles@0.1.0#[method]counter.value".to_string(),
                reason.clone()
            ),
            ("moat:shapes/handles@0.1.0#read".to_string(), reason),
        ]
    );
    assert!(
        !shapes
            .tools
            .iter()
            .any(|t| t.export.contains("counter") || t.name.ends_with("_read"))
    );
    let pong = call(&shapes, "shapes_ping", json!({})).await;
    assert_eq!(moat_tests::text(&pong), "pong");
}
