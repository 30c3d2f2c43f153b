//! What a model sees of a plugin (the `views` test plugin): JSON names in camelCase everywhere,
//! references to sibling functions and parameters in MCP form, `@schema` constraints in the
//! schema and enforced before the guest runs, wrong tags refused at load, and the lint.

use moat::plugin::Tool;
use moat::plugin::lint::lint;
use moat_tests::{call, load, plugins, structured, text, try_call};
use serde_json::{Value, json};

fn tool<'a>(plugin: &'a moat::plugin::Plugin, name: &str) -> &'a Tool {
    plugin
        .tools
        .iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("no tool {name}"))
}

fn trip_args() -> Value {
    json!({
        "startDate": "2026-05-01",
        "maxStops": 3,
        "travelMode": "byTrain",
        "firstStop": {"tag": "namedPlace", "value": "Porto"},
        "options": {"label": "spring", "extras": ["seaView"]},
    })
}

#[test]
fn names_are_camel_case_in_every_schema() {
    let plugin = load("views", plugins::VIEWS);
    let plan = tool(&plugin, "views_plan_trip");
    let input = Value::Object((*plan.input_schema).clone());
    let properties = input["properties"].as_object().unwrap();
    let names: Vec<&str> = properties.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "startDate",
            "maxStops",
            "travelMode",
            "firstStop",
            "options"
        ]
    );
    assert_eq!(
        input["required"],
        json!([
            "startDate",
            "maxStops",
            "travelMode",
            "firstStop",
            "options"
        ])
    );
    let text = input.to_string();
    for camel in [
        "\"onFoot\"",
        "\"byTrain\"",
        "\"namedPlace\"",
        "\"anyStation\"",
        "\"lateCheckout\"",
        "\"nightsPerStop\"",
    ] {
        assert!(text.contains(camel), "{camel} in {text}");
    }
    assert!(
        !text.contains("by-train") && !text.contains("nights-per-stop"),
        "{text}"
    );
    let output = Value::Object((**plan.output_schema.as_ref().unwrap()).clone()).to_string();
    assert!(
        output.contains("\"stopCount\"") && output.contains("\"travelMode\""),
        "{output}"
    );
}

#[tokio::test]
async fn values_go_in_and_come_out_under_their_json_names() {
    let plugin = load("views", plugins::VIEWS);
    let result = call(&plugin, "views_plan_trip", trip_args()).await;
    assert_eq!(
        structured(&result),
        &json!({
            "travelMode": "byTrain",
            "stopCount": 3,
            "firstStop": {"tag": "namedPlace", "value": "Porto"},
            "options": {"label": "spring", "nightsPerStop": null, "extras": ["seaView"]},
        })
    );
}

#[tokio::test]
async fn a_wit_or_snake_case_spelling_is_told_the_json_one() {
    let plugin = load("views", plugins::VIEWS);
    for wrong in ["max-stops", "max_stops"] {
        let mut args = trip_args();
        let stops = args.as_object_mut().unwrap().remove("maxStops").unwrap();
        args[wrong] = stops;
        let error = try_call(&plugin, "views_plan_trip", args)
            .await
            .unwrap_err();
        assert!(
            error.contains(&format!(
                "unknown field \"{wrong}\" (the field is spelt \"maxStops\")"
            )),
            "{error}"
        );
    }
}

#[test]
fn descriptions_name_siblings_and_parameters_as_the_model_knows_them() {
    let plugin = load("views", plugins::VIEWS);
    let plan = tool(&plugin, "views_plan_trip");
    assert_eq!(
        plan.description,
        "Plans a trip of `maxStops` stops. Use it after `views_list_places`, when the user has \
         chosen where to go; see also `views_cancel_trip`."
    );
    assert_eq!(
        plugin.summary.as_deref().map(str::trim),
        Some(
            "Plans trips between the places `views_list_places` knows, for moat's tests of what \
             a model sees."
        )
    );
}

#[tokio::test]
async fn errors_name_siblings_as_the_model_knows_them() {
    let plugin = load("views", plugins::VIEWS);
    let result = call(&plugin, "views_cancel_trip", json!({"tripId": "t1"})).await;
    assert_eq!(result.is_error, Some(true));
    assert_eq!(
        text(&result),
        "no trip t1: plan one with `views_plan_trip` first (at most `max-stops` stops)"
    );
}

#[test]
fn schema_tags_narrow_parameters_and_fields() {
    let plugin = load("views", plugins::VIEWS);
    let input = Value::Object((*tool(&plugin, "views_plan_trip").input_schema).clone());
    let stops = &input["properties"]["maxStops"];
    assert_eq!(
        (stops["minimum"].clone(), stops["maximum"].clone()),
        (json!(1), json!(10))
    );
    let date = &input["properties"]["startDate"];
    assert_eq!(date["format"], "date");
    assert_eq!(date["pattern"], "^[0-9]{4}-[0-9]{2}-[0-9]{2}$");
    let text = input.to_string();
    assert!(text.contains(r#""maxLength":12"#), "{text}");
    assert!(text.contains(r#""examples":["spring"]"#), "{text}");
    assert!(text.contains(r#""default":2"#), "{text}");
}

#[tokio::test]
async fn constraints_are_enforced_before_the_guest_runs() {
    let plugin = load("views", plugins::VIEWS);
    let cases = [
        (
            "maxStops",
            json!(0),
            "maxStops: 0 is less than the minimum of 1",
        ),
        (
            "maxStops",
            json!(11),
            "maxStops: 11 is greater than the maximum of 10",
        ),
        ("startDate", json!("2026-13-45"), "startDate: "),
        ("startDate", json!("May 1st"), "startDate: "),
        (
            "options",
            json!({"label": "a very long label", "extras": []}),
            "options.label: ",
        ),
        (
            "options",
            json!({"nightsPerStop": 0, "extras": []}),
            "options.nightsPerStop: 0 is less than the minimum of 1",
        ),
    ];
    for (param, value, expected) in cases {
        let mut args = trip_args();
        args[param] = value.clone();
        let error = try_call(&plugin, "views_plan_trip", args)
            .await
            .unwrap_err();
        // The path is written as a type mismatch's is: `options.label`, not a JSON pointer.
        assert!(
            error.starts_with(&format!("invalid arguments: {expected}")),
            "{param} = {value}: {error}"
        );
    }
}

#[test]
fn wrong_schema_tags_leave_the_tool_out_with_the_reason() {
    let plugin = load("views", plugins::VIEWS);
    let reason = |export: &str| {
        plugin
            .skipped
            .iter()
            .find(|(e, _)| e == export)
            .map(|(_, why)| why.clone())
            .unwrap_or_else(|| panic!("{export} was offered: {:?}", plugin.skipped))
    };
    assert!(reason("too-wide").contains("maximum 300 is outside the type's own range 0..=255"));
    assert!(reason("wrong-keyword").contains("maxLength applies to strings only"));
    assert!(reason("no-such-param").contains("@schema names \"m\", which is no parameter"));
    assert!(reason("required-default").contains("default needs an option<…> type"));
}

#[test]
fn lint_points_at_what_a_model_would_get_wrong() {
    let plugin = load("views", plugins::VIEWS);
    let findings: Vec<String> = lint(&plugin)
        .iter()
        .map(|f| format!("{}: {}", f.subject, f.message))
        .collect();
    let has = |needle: &str| findings.iter().any(|f| f.contains(needle));
    // cancel_trip says nothing of when to use it, gives no hints, and its parameter has no line.
    assert!(
        has("views_cancel_trip: the description says what the tool does but not when"),
        "{findings:#?}"
    );
    assert!(
        has("views_cancel_trip: no @read-only hint"),
        "{findings:#?}"
    );
    assert!(
        has("views_cancel_trip: no @destructive hint"),
        "{findings:#?}"
    );
    assert!(
        has("views_cancel_trip.tripId: the parameter has no description"),
        "{findings:#?}"
    );
    // "call ping": a one-word sibling in prose, which no rewrite can tell from a word.
    assert!(
        has("views_cancel_trip: names `ping` as WIT does"),
        "{findings:#?}"
    );
    // plan_trip and list_places are written as they should be.
    assert!(
        !findings
            .iter()
            .any(|f| f.starts_with("views_plan_trip") || f.starts_with("views_list_places")),
        "{findings:#?}"
    );
}

/// Every bundled plugin passes `moat lint`.
#[test]
fn the_bundled_plugins_lint_clean() {
    for (name, path) in [
        ("echo", plugins::ECHO),
        ("fetch", plugins::FETCH),
        ("filesystem", plugins::FILESYSTEM),
        ("memory", plugins::MEMORY),
        ("notebook", plugins::NOTEBOOK),
        ("text", plugins::TEXT),
        ("time", plugins::TIME),
        ("weather", plugins::WEATHER),
    ] {
        let findings = lint(&load(name, path));
        assert!(findings.is_empty(), "{name}: {findings:#?}");
    }
}

#[tokio::test]
async fn a_form_carries_its_constraints_and_an_answer_that_breaks_them_is_refused() {
    use moat::plugin::Exchange;
    use moat::sandbox::host::Client;
    let plugin = load("views", plugins::VIEWS);
    let (_, schema) = plugin.forms().find(|(name, _)| *name == "book").unwrap();
    assert_eq!(
        schema["properties"]["nights"],
        json!({"type": "integer", "minimum": 1, "maximum": 30, "default": 2, "description": "how many nights."})
    );
    let book = |answer: Value| {
        let client = crate::notebook::answering(Some(answer));
        let exchange = Exchange {
            events: None,
            client: Some(client as std::sync::Arc<dyn Client>),
            credentials: None,
            reach: None,
        };
        let plugin = plugin.clone();
        async move {
            let tool = tool(&plugin, "views_book_trip");
            let outcome = plugin
                .call_asking(tool, json!({}).as_object(), exchange)
                .await;
            let result = outcome.result.unwrap();
            (result.is_error, text(&result).to_string())
        }
    };
    let (failed, said) = book(json!({"action": "accept", "content": {"nights": 0}})).await;
    assert_eq!(failed, Some(true));
    assert!(
        said.contains("does not fit its form: nights: 0 is less than the minimum of 1"),
        "{said}"
    );
    let (failed, said) = book(json!({"action": "accept", "content": {"nights": 3}})).await;
    assert_eq!(failed, Some(false), "{said}");
    assert!(said.contains(r#""nights":3"#), "{said}");
}
