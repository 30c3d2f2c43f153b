//! JSON arguments → component values (`moat::wit::values`), over every WIT type shape.
//!
//! Input: one byte picks a function of `values.wit`, the rest is the JSON a client would send.
//! Checks that conversion never panics, that it accepts exactly what the tool's JSON Schema
//! (`moat::wit::schema`) accepts, and that what it accepts survives the trip back to JSON and in again
//! unchanged.

use std::sync::LazyLock;

use jsonschema::Validator;
use moat::plugin::MAX_TOOL_SCHEMA_NODES;
use moat::wit::schema::{Budget, object_schema, schema};
use moat::wit::values::{args_from_json, from_json, to_json};
use serde_json::Value;
use wasmtime::component::types::ComponentItem;
use wasmtime::component::{Component, Type};
use wasmtime::{Config, Engine};
use wit_component::{ComponentEncoder, StringEncoding, embed_component_metadata};
use wit_parser::{ManglingAndAbi, Resolve};

/// An exported function: its parameters as wasmtime types them, and validators of the schemas
/// moat gives its arguments object and each parameter.
struct Function {
    params: Vec<(String, Type)>,
    arguments: Validator,
    each: Vec<Validator>,
}

static FUNCTIONS: LazyLock<Vec<Function>> = LazyLock::new(|| {
    let mut resolve = Resolve::default();
    let package = resolve
        .push_str("values.wit", include_str!("values.wit"))
        .expect("values.wit parses");
    let world = resolve.select_world(&[package], Some("fuzz")).unwrap();
    let mut module = wit_component::dummy_module(&resolve, world, ManglingAndAbi::Standard32);
    embed_component_metadata(&mut module, &resolve, world, StringEncoding::UTF8).unwrap();
    let wasm = ComponentEncoder::default()
        .module(&module)
        .unwrap()
        .encode()
        .expect("a component for values.wit");

    let mut config = Config::new();
    config
        .wasm_component_model_map(true)
        .wasm_component_model_fixed_length_lists(true);
    let engine = Engine::new(&config).unwrap();
    let component = Component::new(&engine, &wasm).unwrap();
    let mut functions = Vec::new();
    for (_, item) in component.component_type().exports(&engine) {
        let ComponentItem::ComponentInstance(instance) = item.ty else {
            continue;
        };
        for (_, item) in instance.exports(&engine) {
            if let ComponentItem::ComponentFunc(func) = item.ty {
                let params: Vec<(String, Type)> =
                    func.params().map(|(n, t)| (n.to_string(), t)).collect();
                let arguments = object_schema(
                    params.iter().map(|(n, t)| (n.as_str(), t.clone())),
                    |_| Default::default(),
                    &mut Budget::new(MAX_TOOL_SCHEMA_NODES),
                )
                .unwrap();
                let each = params
                    .iter()
                    .map(|(_, ty)| {
                        validator(
                            &schema(ty, None, &mut Budget::new(MAX_TOOL_SCHEMA_NODES)).unwrap(),
                        )
                    })
                    .collect();
                functions.push(Function {
                    arguments: validator(&arguments),
                    each,
                    params,
                });
            }
        }
    }
    assert!(functions.len() > 30, "every function of values.wit");
    functions
});

/// Runs one input; panics on a finding.
pub fn check(data: &[u8]) {
    let Some((&pick, json)) = data.split_first() else {
        return;
    };
    let Ok(value) = serde_json::from_slice::<Value>(json) else {
        return;
    };
    let function = &FUNCTIONS[usize::from(pick) % FUNCTIONS.len()];
    let params = &function.params;
    let schema_exact = !has_inexact_integer(&value);

    // The whole arguments object, as `tools/call` passes it.
    if let Some(args) = value.as_object() {
        let converted = args_from_json(params, Some(args));
        if schema_exact {
            assert_eq!(
                function.arguments.is_valid(&value),
                converted.is_ok(),
                "the schema and moat disagree on {value}: {converted:?}"
            );
        }
        if let Ok(vals) = converted {
            assert_eq!(vals.len(), params.len());
            for ((_, ty), val) in params.iter().zip(&vals) {
                round_trip(ty, val);
            }
        }
    }
    // One value of each parameter's type.
    for ((_, ty), validator) in params.iter().zip(&function.each) {
        let converted = from_json(ty, &value);
        if schema_exact {
            assert_eq!(
                validator.is_valid(&value),
                converted.is_ok(),
                "the schema and moat disagree on {value}: {converted:?}"
            );
        }
        match converted {
            Ok(val) => round_trip(ty, &val),
            Err(error) => assert!(!error.path.is_empty() && !error.message.is_empty()),
        }
    }
}

fn validator(schema: &Value) -> Validator {
    jsonschema::draft202012::new(schema).expect("moat's schemas compile")
}

/// A number written with a fraction or exponent whose value is an integer of 2^53 or more: JSON
/// Schema counts it an integer, moat refuses to guess which integer was meant (a double has lost
/// digits there). The one place moat is stricter than its schema, by design.
fn has_inexact_integer(value: &Value) -> bool {
    match value {
        Value::Number(n) => n.as_f64().is_some_and(|f| {
            !n.is_i64() && !n.is_u64() && f.fract() == 0.0 && f.abs() >= 9_007_199_254_740_992.0
        }),
        Value::Array(items) => items.iter().any(has_inexact_integer),
        Value::Object(object) => object.values().any(has_inexact_integer),
        _ => false,
    }
}

/// A value read from JSON has a JSON form that reads back as the same value and writes out the
/// same again.
fn round_trip(ty: &Type, val: &wasmtime::component::Val) {
    let json = to_json(ty, val).expect("a value read from JSON writes as JSON");
    let again = from_json(ty, &json).unwrap_or_else(|e| {
        panic!("to_json wrote {json} for {val:?}, which from_json refuses: {e}")
    });
    assert_eq!(&again, val, "{json}");
    assert_eq!(to_json(ty, &again).unwrap(), json);
}
