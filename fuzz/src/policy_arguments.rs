//! Tools' argument schemas as Cedar types, and a call's arguments as Cedar values
//! (`moat::policy::shape`): whatever JSON Schema a tool declares, moat must write a Cedar schema
//! Cedar accepts, and whatever arguments a client sends, moat must refuse them or make a context
//! of the type it declared.
//!
//! Input: the tool's input JSON Schema on the first line, then the arguments as JSON (none: `{}`).
//! Checks that nothing panics; that `Shape::cedar` as an action's `arguments` context is accepted
//! by `Schema::from_cedarschema_str`; and that arguments `Shape::value` accepts make a `Context`,
//! and a request that schema validates.

use cedar_policy::{Context, EntityUid, Request, Schema};
use moat::policy::shape::Shape;
use serde_json::{Map, Value};

/// Runs one input; panics on a finding.
pub fn check(data: &[u8]) {
    let (schema, arguments) = match data.iter().position(|&b| b == b'\n') {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &b""[..]),
    };
    let Ok(schema) = serde_json::from_slice::<Map<String, Value>>(schema) else {
        return;
    };
    let shape = Shape::of_arguments(&schema);
    let text = format!(
        "namespace X {{ entity E; action a appliesTo {{ principal: [E], resource: [E], context: {{ \"arguments\": {} }} }}; }}",
        shape.cedar()
    );
    let cedar = match Schema::from_cedarschema_str(&text) {
        Ok((cedar, _)) => cedar,
        Err(e) => panic!("Cedar refuses the schema moat wrote: {e}\n{text}"),
    };
    let arguments = if arguments.iter().all(u8::is_ascii_whitespace) {
        Value::Object(Map::new())
    } else {
        match serde_json::from_slice::<Value>(arguments) {
            Ok(arguments) => arguments,
            Err(_) => return,
        }
    };
    let Ok(value) = shape.value(&arguments) else {
        return;
    };
    assert!(arguments.is_object(), "accepted {arguments} as a record");
    let context = Context::from_pairs([("arguments".to_string(), value)])
        .unwrap_or_else(|e| panic!("no context of {arguments}: {e}"));
    let uid = |text: &str| text.parse::<EntityUid>().expect("a literal entity");
    let (e, a) = (uid(r#"X::E::"e""#), uid(r#"X::Action::"a""#));
    if let Err(e) = Request::new(e.clone(), a, e, context, Some(&cedar)) {
        panic!("the context of {arguments} is not of the type {text} declares: {e}");
    }
}
