//! A tool's input JSON Schema as an HTML form, and the form's fields back as the arguments
//! it describes: objects as fieldsets, enums as choices, numbers with their range, lists of
//! plain values one per line, anything else (unions, lists of objects) as JSON.
//!
//! Fields are named `arguments.PATH` (`arguments.p.name`), so the form posts as plain
//! `application/x-www-form-urlencoded` and works without JavaScript.

use std::collections::HashMap;

use maud::{Markup, html};
use serde_json::{Map, Number, Value};

/// How deep nested objects become fieldsets; deeper ones are JSON.
const MAX_DEPTH: usize = 6;

/// One field of the form.
struct Field {
    /// `arguments.p.name`.
    path: String,
    label: String,
    description: Option<String>,
    required: bool,
    /// Whether `null` is a value it may take (`option<T>`).
    nullable: bool,
    default: Option<Value>,
    kind: Kind,
}

enum Kind {
    Text,
    Number {
        integer: bool,
        min: Option<Value>,
        max: Option<Value>,
    },
    Boolean,
    Choice(Vec<String>),
    Object(Vec<Field>),
    /// A list of plain values, one per line.
    Lines(Box<Kind>),
    Json,
}

/// The schema `$ref` names, within `root`'s `$defs`.
fn resolved<'a>(schema: &'a Value, root: &'a Value) -> &'a Value {
    let mut schema = schema;
    for _ in 0..8 {
        let Some(name) = schema
            .get("$ref")
            .and_then(Value::as_str)
            .and_then(|r| r.strip_prefix("#/$defs/"))
        else {
            break;
        };
        match root.get("$defs").and_then(|defs| defs.get(name)) {
            Some(target) => schema = target,
            None => break,
        }
    }
    schema
}

/// `T` of an `anyOf [T, null]`, and whether it was one.
fn without_null<'a>(schema: &'a Value, root: &'a Value) -> (&'a Value, bool) {
    let schema = resolved(schema, root);
    if let Some(arms) = schema.get("anyOf").and_then(Value::as_array)
        && arms.len() == 2
        && let Some(null) = arms
            .iter()
            .position(|a| a.get("type") == Some(&"null".into()))
    {
        return (resolved(&arms[1 - null], root), true);
    }
    (schema, false)
}

fn kind_of(schema: &Value, root: &Value, path: &str, depth: usize) -> Kind {
    if let Some(names) = schema.get("enum").and_then(Value::as_array)
        && names.iter().all(Value::is_string)
    {
        return Kind::Choice(
            names
                .iter()
                .filter_map(|n| n.as_str().map(String::from))
                .collect(),
        );
    }
    match schema.get("type").and_then(Value::as_str) {
        Some("string") => Kind::Text,
        Some(kind @ ("integer" | "number")) => Kind::Number {
            integer: kind == "integer",
            min: schema.get("minimum").cloned(),
            max: schema.get("maximum").cloned(),
        },
        Some("boolean") => Kind::Boolean,
        Some("object") if depth < MAX_DEPTH && schema.get("properties").is_some() => {
            Kind::Object(fields_of(schema, root, path, depth + 1))
        }
        Some("array") => {
            let items = schema.get("items").map(|i| resolved(i, root));
            match items.map(|items| kind_of(items, root, path, MAX_DEPTH)) {
                Some(inner @ (Kind::Text | Kind::Number { .. } | Kind::Choice(_))) => {
                    Kind::Lines(Box::new(inner))
                }
                _ => Kind::Json,
            }
        }
        _ => Kind::Json,
    }
}

/// The fields of an object schema's properties, under `path`.
fn fields_of(schema: &Value, root: &Value, path: &str, depth: usize) -> Vec<Field> {
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return Vec::new();
    };
    properties
        .iter()
        .map(|(name, property)| {
            let (inner, nullable) = without_null(property, root);
            let path = format!("{path}.{name}");
            Field {
                kind: kind_of(inner, root, &path, depth),
                label: inner
                    .get("title")
                    .or(property.get("title"))
                    .and_then(Value::as_str)
                    .unwrap_or(name)
                    .to_string(),
                description: (property.get("description").or(inner.get("description")))
                    .and_then(Value::as_str)
                    .map(String::from),
                required: required.contains(&name.as_str()),
                nullable,
                default: property.get("default").or(inner.get("default")).cloned(),
                path,
            }
        })
        .collect()
}

/// The form fields of the tool whose input schema is `schema`, filled with `values` (what
/// was sent last) or the schema's defaults.
pub fn fields(schema: &Value, values: &HashMap<String, String>) -> Markup {
    let fields = fields_of(schema, schema, "arguments", 0);
    html! { @for field in &fields { (field_html(field, values)) } }
}

fn field_html(field: &Field, values: &HashMap<String, String>) -> Markup {
    let id = field.path.replace('.', "-");
    let value = values.get(&field.path).cloned().or_else(|| {
        field.default.as_ref().map(|d| match (&field.kind, d) {
            (_, Value::String(s)) => s.clone(),
            (Kind::Lines(_), Value::Array(items)) => items
                .iter()
                .map(|i| i.as_str().map_or_else(|| i.to_string(), String::from))
                .collect::<Vec<_>>()
                .join("\n"),
            (_, other) => other.to_string(),
        })
    });
    let value = value.unwrap_or_default();
    let optional = !field.required || field.nullable;
    let help = field.description.as_deref();
    let label = html! {
        label for=(id) {
            (field.label)
            @if field.required && !field.nullable { span.required title="required" { " *" } }
        }
        @if let Some(help) = help { small.help { (help) } }
    };
    match &field.kind {
        Kind::Object(children) => html! {
            fieldset #(id) {
                legend { (field.label) @if !optional { span.required { " *" } } }
                @if let Some(help) = help { small.help { (help) } }
                @for child in children { (field_html(child, values)) }
            }
        },
        Kind::Text => html! {
            div.field { (label) input #(id) type="text" name=(field.path) value=(value) required[!optional]; }
        },
        Kind::Number { integer, min, max } => html! {
            div.field {
                (label)
                input #(id) type="number" name=(field.path) value=(value) required[!optional]
                    step=(if *integer { "1" } else { "any" })
                    min=[min.as_ref().map(Value::to_string)] max=[max.as_ref().map(Value::to_string)];
            }
        },
        Kind::Boolean => html! {
            div.field {
                (label)
                select #(id) name=(field.path) {
                    @if optional { option value="" selected[value.is_empty()] { "—" } }
                    option value="true" selected[value == "true"] { "true" }
                    option value="false" selected[value == "false"] { "false" }
                }
            }
        },
        Kind::Choice(names) => html! {
            div.field {
                (label)
                select #(id) name=(field.path) {
                    @if optional { option value="" selected[value.is_empty()] { "—" } }
                    @for name in names { option value=(name) selected[*name == value] { (name) } }
                }
            }
        },
        Kind::Lines(_) => html! {
            div.field {
                (label) small.help { "One per line." }
                textarea #(id) name=(field.path) rows="3" { (value) }
            }
        },
        Kind::Json => html! {
            div.field {
                (label) small.help { "As JSON." }
                textarea #(id) name=(field.path) rows="4" { (value) }
            }
        },
    }
}

/// The arguments the posted `values` give, by the tool's input `schema`; or what is wrong.
pub fn arguments(schema: &Value, values: &HashMap<String, String>) -> Result<Value, String> {
    let fields = fields_of(schema, schema, "arguments", 0);
    Ok(Value::Object(object(&fields, values)?.unwrap_or_default()))
}

/// The object `fields` give; none when every field was left empty.
fn object(
    fields: &[Field],
    values: &HashMap<String, String>,
) -> Result<Option<Map<String, Value>>, String> {
    let mut made = Map::new();
    for field in fields {
        let name = field
            .path
            .rsplit('.')
            .next()
            .unwrap_or(&field.path)
            .to_string();
        let value = match &field.kind {
            Kind::Object(children) => object(children, values)?.map(Value::Object),
            kind => {
                let text = values.get(&field.path).map(|t| t.trim()).unwrap_or("");
                if text.is_empty() {
                    None
                } else {
                    Some(parse(kind, text).map_err(|why| format!("{}: {why}", field.path))?)
                }
            }
        };
        match value {
            Some(value) => {
                made.insert(name, value);
            }
            // An empty `option<T>` the tool requires is null; an optional field is left out.
            None if field.required && field.nullable => {
                made.insert(name, Value::Null);
            }
            None if field.required && matches!(field.kind, Kind::Object(_)) => {
                made.insert(name, Value::Object(Map::new()));
            }
            None if field.required && matches!(field.kind, Kind::Lines(_)) => {
                made.insert(name, Value::Array(Vec::new()));
            }
            None => {}
        }
    }
    Ok((!made.is_empty()).then_some(made))
}

fn parse(kind: &Kind, text: &str) -> Result<Value, String> {
    match kind {
        Kind::Text | Kind::Choice(_) => Ok(Value::String(text.to_string())),
        Kind::Number { integer: true, .. } => text
            .parse::<i64>()
            .map(Value::from)
            .or_else(|_| text.parse::<u64>().map(Value::from))
            .map_err(|_| format!("\"{text}\" is not a whole number")),
        Kind::Number { .. } => text
            .parse::<f64>()
            .ok()
            .and_then(Number::from_f64)
            .map(Value::Number)
            .ok_or_else(|| format!("\"{text}\" is not a number")),
        Kind::Boolean => match text {
            "true" => Ok(Value::Bool(true)),
            "false" => Ok(Value::Bool(false)),
            _ => Err(format!("\"{text}\" is neither true nor false")),
        },
        Kind::Lines(inner) => text
            .lines()
            .map(str::trim)
            .filter(|line| !line.is_empty())
            .map(|line| parse(inner, line))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array),
        Kind::Json => serde_json::from_str(text).map_err(|e| format!("not JSON: {e}")),
        Kind::Object(_) => Err("an object is made of its fields".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn person() -> Value {
        json!({
            "type": "object",
            "properties": {
                "p": {"$ref": "#/$defs/Person"},
                "count": {"type": "integer", "minimum": 0, "maximum": 255, "default": 3},
                "loud": {"type": "boolean"},
            },
            "required": ["p", "count"],
            "$defs": {
                "Person": {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string"},
                        "age": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
                        "favourite": {"anyOf": [{"type": "string", "enum": ["red", "green", "blue"]}, {"type": "null"}]},
                        "tags": {"type": "array", "items": {"type": "string"}},
                        "points": {"type": "array", "items": {"type": "object", "properties": {"x": {"type": "number"}}}},
                    },
                    "required": ["name", "tags"],
                },
            },
        })
    }

    #[test]
    fn a_schema_becomes_fields_of_the_right_kinds() {
        let form = fields(&person(), &HashMap::new()).into_string();
        assert!(form.contains("<fieldset id=\"arguments-p\">"), "{form}");
        assert!(form.contains("name=\"arguments.p.name\""));
        assert!(form.contains("<select id=\"arguments-p-favourite\" name=\"arguments.p.favourite\"><option value=\"\" selected>"), "{form}");
        assert!(form.contains("type=\"number\" name=\"arguments.count\" value=\"3\" required step=\"1\" min=\"0\" max=\"255\""), "{form}");
        assert!(form.contains("<textarea id=\"arguments-p-tags\""));
        assert!(form.contains("As JSON."), "a list of objects is JSON");
    }

    #[test]
    fn posted_fields_become_the_arguments_the_schema_describes() {
        let values: HashMap<String, String> = [
            ("arguments.p.name", "Ada"),
            ("arguments.p.age", "36"),
            ("arguments.p.favourite", "green"),
            ("arguments.p.tags", "math\n\n engines \n"),
            ("arguments.p.points", "[{\"x\": 1.5}]"),
            ("arguments.count", "2"),
            ("arguments.loud", ""),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let arguments = arguments(&person(), &values).unwrap();
        assert_eq!(
            arguments,
            json!({"p": {"name": "Ada", "age": 36, "favourite": "green", "tags": ["math", "engines"], "points": [{"x": 1.5}]}, "count": 2})
        );
        let mut wrong = values.clone();
        wrong.insert("arguments.count".into(), "two".into());
        let error = super::arguments(&person(), &wrong).unwrap_err();
        assert_eq!(error, "arguments.count: \"two\" is not a whole number");
    }
}
