//! The Cedar type of a tool's arguments, read from its input JSON Schema (which moat made from
//! the tool's WIT, or which an MCP server component declared), and the Cedar value of the
//! arguments a call gives.
//!
//! | JSON Schema | Cedar |
//! |---|---|
//! | `string` (an `enum`, a `const`) | `String` |
//! | `integer` | `Long` (a value beyond ±2⁶³ is refused) |
//! | `boolean` | `Bool` |
//! | `array` with `items` | `Set<…>` |
//! | `object` with `properties` | a record: the required properties required, the rest optional |
//! | `anyOf [T, null]` (a WIT `option`) | `T`, optional in its record |
//!
//! What has no Cedar type (a fraction, a tuple, a variant, a map) is left out of the record: a
//! policy that names it is refused by the validator, as one naming an argument that does not
//! exist.

use std::collections::BTreeMap;

use cedar_policy::RestrictedExpression;
use serde_json::{Map, Value};

/// How deep arguments nest before moat stops typing them: the schemas moat makes are bounded,
/// and a served server's are not.
const MAX_DEPTH: usize = 16;

/// A Cedar type an argument can have.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Shape {
    String,
    Long,
    Bool,
    Set(Box<Shape>),
    Record(BTreeMap<String, Attribute>),
}

/// One attribute of a record: its type, and whether every value has it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attribute {
    pub shape: Shape,
    pub required: bool,
}

impl Shape {
    /// The record of a tool's arguments: every property of its input schema that has a Cedar
    /// type. An input schema that is not an object gives an empty record.
    pub fn of_arguments(input_schema: &Map<String, Value>) -> Shape {
        match properties(input_schema, 0) {
            Some(record) => Shape::Record(record),
            None => Shape::Record(BTreeMap::new()),
        }
    }

    /// The type in Cedar's schema syntax.
    pub fn cedar(&self) -> String {
        match self {
            Shape::String => "String".into(),
            Shape::Long => "Long".into(),
            Shape::Bool => "Bool".into(),
            Shape::Set(element) => format!("Set<{}>", element.cedar()),
            Shape::Record(attributes) => {
                let attributes: Vec<String> = attributes
                    .iter()
                    .map(|(name, a)| {
                        let optional = if a.required { "" } else { "?" };
                        format!("{}{optional}: {}", quoted(name), a.shape.cedar())
                    })
                    .collect();
                format!("{{{}}}", attributes.join(", "))
            }
        }
    }

    /// The Cedar value of `value`, which must have this shape; attributes the record does not
    /// type are left out, and a `null` leaves its attribute out.
    pub fn value(&self, value: &Value) -> Result<RestrictedExpression, String> {
        self.value_at(value, "arguments")
    }

    fn value_at(&self, value: &Value, at: &str) -> Result<RestrictedExpression, String> {
        let wrong = |expected: &str| format!("{at} is not {expected}");
        Ok(match (self, value) {
            (Shape::String, Value::String(s)) => RestrictedExpression::new_string(s.clone()),
            (Shape::Bool, Value::Bool(b)) => RestrictedExpression::new_bool(*b),
            (Shape::Long, Value::Number(n)) => RestrictedExpression::new_long(
                n.as_i64()
                    .ok_or_else(|| wrong("a whole number between -2^63 and 2^63"))?,
            ),
            (Shape::Set(element), Value::Array(items)) => {
                let items: Result<Vec<_>, String> = items
                    .iter()
                    .enumerate()
                    .map(|(i, item)| element.value_at(item, &format!("{at}[{i}]")))
                    .collect();
                RestrictedExpression::new_set(items?)
            }
            (Shape::Record(attributes), Value::Object(fields)) => {
                let mut pairs = Vec::new();
                for (name, attribute) in attributes {
                    match fields.get(name) {
                        None | Some(Value::Null) if attribute.required => {
                            return Err(format!("{at}.{name} is missing"));
                        }
                        None | Some(Value::Null) => {}
                        Some(field) => pairs.push((
                            name.clone(),
                            attribute.shape.value_at(field, &format!("{at}.{name}"))?,
                        )),
                    }
                }
                RestrictedExpression::new_record(pairs).map_err(|e| e.to_string())?
            }
            (Shape::String, _) => return Err(wrong("a string")),
            (Shape::Bool, _) => return Err(wrong("true or false")),
            (Shape::Long, _) => return Err(wrong("a whole number")),
            (Shape::Set(_), _) => return Err(wrong("an array")),
            (Shape::Record(_), _) => return Err(wrong("an object")),
        })
    }
}

/// A name as a Cedar string literal, as its schemas write attributes: always quoted, so any
/// name is one. Escaped as Rust escapes (`\u{1}`), which Cedar reads; JSON's (`\u0001`, `\b`)
/// it refuses.
pub fn quoted(name: &str) -> String {
    format!("\"{}\"", name.escape_debug())
}

/// The record of an object schema's properties, if it is an object with properties.
fn properties(schema: &Map<String, Value>, depth: usize) -> Option<BTreeMap<String, Attribute>> {
    if schema.get("type").and_then(Value::as_str) != Some("object") {
        return None;
    }
    let properties = schema.get("properties")?.as_object()?;
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut record = BTreeMap::new();
    for (name, property) in properties {
        let Some(property) = property.as_object() else {
            continue;
        };
        let Some((shape, nullable)) = shape(property, depth + 1) else {
            continue;
        };
        let required = required.contains(&name.as_str()) && !nullable;
        record.insert(name.clone(), Attribute { shape, required });
    }
    Some(record)
}

/// The shape of a value's schema, and whether it may be `null`.
fn shape(schema: &Map<String, Value>, depth: usize) -> Option<(Shape, bool)> {
    if depth > MAX_DEPTH {
        return None;
    }
    // `anyOf [T, null]`: a WIT `option<T>` (and what zod's `.nullable()` writes).
    if let Some(cases) = schema.get("anyOf").and_then(Value::as_array) {
        let is_null = |c: &Value| c.get("type").and_then(Value::as_str) == Some("null");
        let others: Vec<&Value> = cases.iter().filter(|c| !is_null(c)).collect();
        return match others.as_slice() {
            [one] if others.len() < cases.len() => {
                shape(one.as_object()?, depth).map(|(shape, _)| (shape, true))
            }
            _ => None,
        };
    }
    let (kind, nullable) = match schema.get("type") {
        Some(Value::String(kind)) => (kind.as_str(), false),
        // `["string", "null"]`
        Some(Value::Array(kinds)) => {
            let kinds: Vec<&str> = kinds.iter().filter_map(Value::as_str).collect();
            match kinds.as_slice() {
                [kind, "null"] | ["null", kind] => (*kind, true),
                _ => return None,
            }
        }
        None if all_strings(schema.get("enum"))
            || schema.get("const").is_some_and(Value::is_string) =>
        {
            ("string", false)
        }
        _ => return None,
    };
    let shape = match kind {
        "string" => Shape::String,
        "integer" => Shape::Long,
        "boolean" => Shape::Bool,
        "array" if schema.get("prefixItems").is_none() => {
            let items = schema.get("items")?.as_object()?;
            let (element, element_nullable) = shape(items, depth + 1)?;
            if element_nullable {
                return None;
            }
            Shape::Set(Box::new(element))
        }
        "object" => Shape::Record(properties(schema, depth)?),
        _ => return None,
    };
    Some((shape, nullable))
}

fn all_strings(values: Option<&Value>) -> bool {
    values
        .and_then(Value::as_array)
        .is_some_and(|values| !values.is_empty() && values.iter().all(Value::is_string))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn of(schema: Value) -> Shape {
        Shape::of_arguments(schema.as_object().unwrap())
    }

    #[test]
    fn wit_types_become_cedar_types() {
        let shape = of(json!({
            "type": "object",
            "properties": {
                "url": {"type": "string"},
                "count": {"type": "integer", "minimum": 0, "maximum": 4294967295u64},
                "verbose": {"anyOf": [{"type": "boolean"}, {"type": "null"}]},
                "tags": {"type": "array", "items": {"type": "string"}},
                "mode": {"type": "string", "enum": ["fast", "slow"]},
                "ratio": {"type": "number"},
                "pair": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}]},
                "where": {"type": "object", "properties": {"lat": {"type": "integer"}}, "required": ["lat"]}
            },
            "required": ["url", "count", "verbose", "tags", "mode", "ratio", "pair", "where"]
        }));
        assert_eq!(
            shape.cedar(),
            r#"{"count": Long, "mode": String, "tags": Set<String>, "url": String, "verbose"?: Bool, "where": {"lat": Long}}"#
        );
    }

    #[test]
    fn values_follow_the_shape_and_a_mismatch_is_named() {
        let shape = of(json!({
            "type": "object",
            "properties": {"url": {"type": "string"}, "n": {"type": "integer"}, "o": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
            "required": ["url", "n"]
        }));
        assert!(
            shape
                .value(&json!({"url": "x", "n": 3, "o": null, "extra": 1.5}))
                .is_ok()
        );
        assert_eq!(
            shape.value(&json!({"url": 3, "n": 3})).unwrap_err(),
            "arguments.url is not a string"
        );
        assert_eq!(
            shape.value(&json!({"url": "x"})).unwrap_err(),
            "arguments.n is missing"
        );
        assert_eq!(
            shape
                .value(&json!({"url": "x", "n": 18446744073709551615u64}))
                .unwrap_err(),
            "arguments.n is not a whole number between -2^63 and 2^63"
        );
    }

    #[test]
    fn deep_schemas_stop_being_typed() {
        let mut schema = json!({"type": "string"});
        for _ in 0..40 {
            schema = json!({"type": "object", "properties": {"a": schema}});
        }
        let shape = Shape::of_arguments(schema.as_object().unwrap());
        assert!(shape.cedar().len() < 40 * 10);
    }
}
