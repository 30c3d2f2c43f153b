//! WIT types as JSON Schema (draft 2020-12), exact: the schema accepts precisely the JSON that
//! [`crate::values::from_json`] turns into a value of the type.
//!
//! | WIT | JSON |
//! |---|---|
//! | `u8`…`s64` | `integer` with the type's `minimum` and `maximum` (64-bit values are exact: moat never goes through a double) |
//! | `f32`, `f64` | `number` (finite; `f32` bounded by its range) |
//! | `char` | a string of one code point |
//! | `list<T>`, `list<T, N>` | `array` (with `N` items) |
//! | `tuple<…>` | `array` with `prefixItems` |
//! | `record` | `object`, `additionalProperties: false`, fields required unless `option<T>` |
//! | `variant` | `oneOf` of `{"tag": "case", "value": payload}` (no `value` for a case without payload) |
//! | `enum` | a string `enum` |
//! | `option<T>` | `T` or `null` (`option<option<T>>`: `null` or `{"some": …}`, so both levels stay apart) |
//! | `result<T, E>` | `{"ok": T}` or `{"err": E}` |
//! | `flags` | an array of unique flag names |
//! | `map<string, V>` | an `object`; other keys: an array of `[key, value]` pairs |
//!
//! Resources, streams, futures and error contexts have no JSON form: a tool that uses them is
//! skipped (see [`Unsupported`]).

use serde_json::{Map, Value, json};
use wasmtime::component::Type;

use crate::docs::TypeDocs;

/// A type with no JSON form; the string names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsupported(pub &'static str);

impl std::fmt::Display for Unsupported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} values have no JSON form", self.0)
    }
}

/// The largest `f32`, as JSON sees it.
const F32_MAX: f64 = f32::MAX as f64;

/// The inclusive range of an integer type, or `None` for other types.
pub fn integer_range(ty: &Type) -> Option<(i128, i128)> {
    Some(match ty {
        Type::U8 => (0, u8::MAX.into()),
        Type::U16 => (0, u16::MAX.into()),
        Type::U32 => (0, u32::MAX.into()),
        Type::U64 => (0, u64::MAX.into()),
        Type::S8 => (i8::MIN.into(), i8::MAX.into()),
        Type::S16 => (i16::MIN.into(), i16::MAX.into()),
        Type::S32 => (i32::MIN.into(), i32::MAX.into()),
        Type::S64 => (i64::MIN.into(), i64::MAX.into()),
        _ => return None,
    })
}

/// The schema of values of `ty`; `docs` adds descriptions where the plugin documented them.
pub fn schema(ty: &Type, docs: Option<TypeDocs<'_>>) -> Result<Value, Unsupported> {
    let mut schema = match ty {
        Type::Bool => json!({"type": "boolean"}),
        Type::U8
        | Type::U16
        | Type::U32
        | Type::U64
        | Type::S8
        | Type::S16
        | Type::S32
        | Type::S64 => {
            let (min, max) = integer_range(ty).expect("an integer type");
            json!({"type": "integer", "minimum": number(min), "maximum": number(max)})
        }
        Type::Float32 => json!({"type": "number", "minimum": -F32_MAX, "maximum": F32_MAX}),
        Type::Float64 => json!({"type": "number"}),
        Type::Char => json!({"type": "string", "minLength": 1, "maxLength": 1}),
        Type::String => json!({"type": "string"}),
        Type::List(list) => {
            json!({"type": "array", "items": schema(&list.ty(), docs.and_then(|d| d.element()))?})
        }
        Type::FixedLengthList(list) => json!({
            "type": "array",
            "items": schema(&list.ty(), docs.and_then(|d| d.element()))?,
            "minItems": list.len(),
            "maxItems": list.len(),
        }),
        Type::Map(map) => map_schema(&map.key(), &map.value(), docs)?,
        Type::Tuple(tuple) => {
            let items = tuple
                .types()
                .enumerate()
                .map(|(i, t)| schema(&t, docs.and_then(|d| d.tuple_item(i))))
                .collect::<Result<Vec<_>, _>>()?;
            json!({
                "type": "array",
                "prefixItems": items,
                "items": false,
                "minItems": items.len(),
                "maxItems": items.len(),
            })
        }
        Type::Record(record) => object_schema(
            record.fields().map(|field| (field.name, field.ty)),
            |name| {
                let (description, field_docs) = docs.map_or((None, None), |d| d.field(name));
                (description.map(str::to_string), field_docs)
            },
        )?,
        Type::Variant(variant) => {
            let cases = variant
                .cases()
                .map(|case| {
                    let (description, payload_docs) =
                        docs.map_or((None, None), |d| d.case(case.name));
                    let mut properties = Map::new();
                    properties.insert("tag".into(), json!({"const": case.name}));
                    let mut required = vec!["tag"];
                    if let Some(payload) = &case.ty {
                        properties.insert("value".into(), schema(payload, payload_docs)?);
                        required.push("value");
                    }
                    let mut case_schema = json!({
                        "type": "object",
                        "properties": properties,
                        "required": required,
                        "additionalProperties": false,
                    });
                    describe(&mut case_schema, description);
                    Ok(case_schema)
                })
                .collect::<Result<Vec<_>, _>>()?;
            json!({"oneOf": cases})
        }
        Type::Enum(enum_) => {
            let names: Vec<&str> = enum_.names().collect();
            let mut schema = json!({"type": "string", "enum": names});
            // JSON Schema has no place for one enum value's comment: list them in the description.
            let cases: Vec<String> = names
                .iter()
                .filter_map(|name| {
                    let (doc, _) = docs?.case(name);
                    Some(format!("`{name}`: {}", doc?.trim()))
                })
                .collect();
            if !cases.is_empty() {
                let intro = docs.and_then(|d| d.description()).map(str::trim);
                let text = intro
                    .into_iter()
                    .map(str::to_string)
                    .chain(cases)
                    .collect::<Vec<_>>();
                schema["description"] = text.join("\n").into();
            }
            schema
        }
        Type::Option(option) => {
            let inner = option.ty();
            let inner_schema = schema(&inner, docs.and_then(|d| d.element()))?;
            if matches!(inner, Type::Option(_)) {
                json!({"oneOf": [
                    {"type": "null"},
                    {
                        "type": "object",
                        "properties": {"some": inner_schema},
                        "required": ["some"],
                        "additionalProperties": false,
                    },
                ]})
            } else {
                json!({"anyOf": [inner_schema, {"type": "null"}]})
            }
        }
        Type::Result(result) => {
            let (ok_docs, err_docs) = docs.map_or((None, None), |d| d.result_arms());
            let arm = |name: &str, ty: Option<Type>, docs| -> Result<Value, Unsupported> {
                let payload = match ty {
                    Some(ty) => schema(&ty, docs)?,
                    None => json!({"type": "null"}),
                };
                Ok(json!({
                    "type": "object",
                    "properties": {name: payload},
                    "required": [name],
                    "additionalProperties": false,
                }))
            };
            json!({"oneOf": [arm("ok", result.ok(), ok_docs)?, arm("err", result.err(), err_docs)?]})
        }
        Type::Flags(flags) => {
            let names: Vec<&str> = flags.names().collect();
            json!({"type": "array", "items": {"enum": names}, "uniqueItems": true})
        }
        Type::Own(_) | Type::Borrow(_) => return Err(Unsupported("resource")),
        Type::Future(_) => return Err(Unsupported("future")),
        Type::Stream(_) => return Err(Unsupported("stream")),
        Type::ErrorContext => return Err(Unsupported("error-context")),
    };
    describe(&mut schema, docs.and_then(|d| d.description()));
    Ok(schema)
}

/// A closed object with one property per named field; fields of `option` type may be left out.
pub fn object_schema<'a, 'd>(
    fields: impl Iterator<Item = (&'a str, Type)>,
    docs_of: impl Fn(&str) -> (Option<String>, Option<TypeDocs<'d>>),
) -> Result<Value, Unsupported> {
    let mut properties = Map::new();
    let mut required = Vec::new();
    for (name, ty) in fields {
        let (description, field_docs) = docs_of(name);
        let mut field_schema = schema(&ty, field_docs)?;
        // A field's own comment says more about it than its type's comment.
        if let Some(description) = description {
            field_schema["description"] = description.trim().into();
        }
        if !matches!(ty, Type::Option(_)) {
            required.push(name);
        }
        properties.insert(name.to_string(), field_schema);
    }
    Ok(json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    }))
}

fn map_schema(key: &Type, value: &Type, docs: Option<TypeDocs<'_>>) -> Result<Value, Unsupported> {
    let value_schema = schema(value, docs.and_then(|d| d.map_value()))?;
    Ok(if matches!(key, Type::String) {
        json!({"type": "object", "additionalProperties": value_schema})
    } else {
        json!({"type": "array", "items": {
            "type": "array",
            "prefixItems": [schema(key, None)?, value_schema],
            "items": false,
            "minItems": 2,
            "maxItems": 2,
        }})
    })
}

fn describe(schema: &mut Value, description: Option<&str>) {
    if let (Some(description), Some(object)) = (description, schema.as_object_mut()) {
        object
            .entry("description")
            .or_insert_with(|| description.trim().into());
    }
}

/// An integer bound as a JSON number: exact, since serde_json keeps 64-bit integers whole.
fn number(n: i128) -> Value {
    match (i64::try_from(n), u64::try_from(n)) {
        (Ok(n), _) => n.into(),
        (_, Ok(n)) => n.into(),
        _ => unreachable!("WIT integers fit in 64 bits"),
    }
}
