//! Named WIT types used more than once in a schema become `$defs`, referenced by `$ref`: the same
//! validation in fewer bytes (a `point` in five places is written once).
//!
//! [`crate::wit::schema::schema`] marks the schema of every named record, variant, enum and
//! flags type with [`MARK`]; [`factor`] then moves each name that occurs twice or more, always with
//! the same schema, into `$defs`, and removes every mark. A name given to two different types (an
//! `address` in two interfaces) stays written out where it is used.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

/// The key that marks a named type's schema until [`factor`] takes it out.
pub const MARK: &str = "$moat-type";

/// The dialect a schema with `$defs` names, as MCP's tools default to.
pub const DIALECT: &str = "https://json-schema.org/draft/2020-12/schema";

/// `schema` with its shared named types in `$defs` and no marks left.
pub fn factor(mut schema: Value) -> Value {
    let mut seen: BTreeMap<String, (usize, Option<Value>, bool)> = BTreeMap::new();
    count(&schema, &mut seen);
    let shared: BTreeSet<String> = seen
        .into_iter()
        .filter(|(_, (uses, _, same))| *uses > 1 && *same)
        .map(|(name, _)| name)
        .collect();
    let mut defs = Map::new();
    replace(&mut schema, &shared, &mut defs);
    if !defs.is_empty()
        && let Some(object) = schema.as_object_mut()
    {
        object.insert("$defs".into(), Value::Object(defs));
        // The dialect first, as schemas are written.
        let mut ordered = Map::new();
        ordered.insert("$schema".into(), DIALECT.into());
        ordered.extend(std::mem::take(object));
        *object = ordered;
    }
    schema
}

/// A marked schema as it would be defined: without its mark and its description (a field's
/// own comment may replace the type's).
fn body(object: &Map<String, Value>) -> Value {
    let mut body = object.clone();
    body.remove(MARK);
    body.remove("description");
    Value::Object(body)
}

/// Counts each name's uses, and whether every use has the same schema.
fn count(value: &Value, seen: &mut BTreeMap<String, (usize, Option<Value>, bool)>) {
    match value {
        Value::Object(object) => {
            if let Some(Value::String(name)) = object.get(MARK) {
                let body = body(object);
                let entry = seen.entry(name.clone()).or_insert((0, None, true));
                entry.0 += 1;
                match &entry.1 {
                    None => entry.1 = Some(body),
                    Some(first) => entry.2 &= *first == body,
                }
            }
            object.values().for_each(|v| count(v, seen));
        }
        Value::Array(items) => items.iter().for_each(|v| count(v, seen)),
        _ => {}
    }
}

/// Replaces each use of a `shared` name by a `$ref`, defining it on first sight, and drops every
/// other mark.
fn replace(value: &mut Value, shared: &BTreeSet<String>, defs: &mut Map<String, Value>) {
    match value {
        Value::Object(object) => {
            let name = match object.remove(MARK) {
                Some(Value::String(name)) if shared.contains(&name) => Some(name),
                _ => None,
            };
            object.values_mut().for_each(|v| replace(v, shared, defs));
            if let Some(name) = name {
                let description = object.get("description").cloned();
                if !defs.contains_key(&name) {
                    defs.insert(name.clone(), Value::Object(object.clone()));
                }
                let defined = defs[&name].get("description").cloned();
                let mut reference = json!({"$ref": format!("#/$defs/{name}")});
                if description.is_some() && description != defined {
                    reference["description"] = description.unwrap_or_default();
                }
                *value = reference;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| replace(v, shared, defs)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(description: &str) -> Value {
        json!({MARK: "point", "type": "object", "description": description, "properties": {"x": {"type": "integer"}}})
    }

    #[test]
    fn a_name_used_twice_is_defined_once() {
        let schema = json!({
            "type": "object",
            "properties": {"from": point("A point."), "to": point("The end.")},
        });
        let factored = factor(schema);
        assert_eq!(factored["$schema"], DIALECT);
        assert_eq!(factored["$defs"]["point"]["description"], "A point.");
        assert!(factored["$defs"]["point"].get(MARK).is_none());
        assert_eq!(
            factored["properties"]["from"],
            json!({"$ref": "#/$defs/point"})
        );
        assert_eq!(
            factored["properties"]["to"],
            json!({"$ref": "#/$defs/point", "description": "The end."})
        );
    }

    #[test]
    fn a_name_used_once_or_for_two_types_stays_inline() {
        let mut other = point("A point.");
        other["properties"] = json!({"y": {"type": "string"}});
        let schema = json!({"properties": {"a": point("A point."), "b": other, "c": {MARK: "solo", "type": "string"}}});
        let factored = factor(schema);
        assert!(factored.get("$defs").is_none() && factored.get("$schema").is_none());
        assert!(!factored.to_string().contains(MARK));
        assert_eq!(factored["properties"]["c"], json!({"type": "string"}));
    }
}
