//! WIT types as JSON Schema (draft 2020-12), exact: the schema accepts precisely the JSON that
//! [`crate::wit::values::from_json`] turns into a value of the type.
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
//! Every WIT name in a value (a field, a parameter, a case, a flag) is written in lowerCamelCase
//! ([`crate::wit::naming::json_name`]): `dry-run` is `dryRun`.
//!
//! Resources, streams, futures and error contexts have no JSON form: a tool that uses them is
//! skipped (see [`Unsupported`]).
//!
//! A schema is the full expansion of its type, and component types share their parts: a record
//! of four fields of a record of four fields… is small in the component and exponential once
//! written out. Every schema is therefore built against a [`Budget`] of nodes, charged before
//! each node is made, so that an oversized type stops the expansion at the limit instead of
//! being built and then measured.

use serde_json::{Map, Value, json};
use wasmtime::component::Type;

use crate::wit::docs::{FieldDocs, TypeDocs};
use crate::wit::naming::json_name;
use crate::wit::{constraints, defs};

/// A type with no JSON form; the string names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsupported(pub &'static str);

impl std::fmt::Display for Unsupported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} values have no JSON form", self.0)
    }
}

/// Why a type has no schema here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SchemaError {
    /// The type has no JSON form: the tool is left out, the plugin loads.
    Unsupported(Unsupported),
    /// The schema would be larger than its [`Budget`] allows: the plugin is refused.
    TooLarge,
    /// The type or its docs cannot make a sound schema (two names that are one in JSON, a wrong
    /// `@schema` tag): the tool is left out, with the reason.
    Invalid(String),
}

impl From<Unsupported> for SchemaError {
    fn from(unsupported: Unsupported) -> Self {
        SchemaError::Unsupported(unsupported)
    }
}

/// How many schema nodes may still be made. A node is one schema object, or one name or
/// description in it (a long text counts once per [`TEXT_BYTES_PER_NODE`] bytes, since names
/// and comments are repeated wherever their type is).
#[derive(Debug)]
pub struct Budget {
    left: usize,
    narrowed: bool,
}

/// The bytes of a name or description that count as one node.
pub const TEXT_BYTES_PER_NODE: usize = 64;

impl Budget {
    pub fn new(nodes: usize) -> Self {
        Self {
            left: nodes,
            narrowed: false,
        }
    }

    /// Whether a `@schema` tag narrowed some part of the schemas built with this budget: values
    /// then need checking against the schema, beyond their type.
    pub fn narrowed(&self) -> bool {
        self.narrowed
    }

    /// The nodes not spent yet.
    pub fn left(&self) -> usize {
        self.left
    }

    /// Takes `nodes` from the budget, or fails when fewer are left.
    fn spend(&mut self, nodes: usize) -> Result<(), SchemaError> {
        self.left = self.left.checked_sub(nodes).ok_or(SchemaError::TooLarge)?;
        Ok(())
    }

    fn spend_text(&mut self, text: &str) -> Result<(), SchemaError> {
        self.spend(1 + text.len() / TEXT_BYTES_PER_NODE)
    }

    fn spend_names<'a>(
        &mut self,
        mut names: impl Iterator<Item = &'a str>,
    ) -> Result<(), SchemaError> {
        names.try_for_each(|name| self.spend_text(name))
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

/// The schema of values of `ty`; `docs` adds descriptions where the plugin documented them, and
/// marks each named type's schema for [`defs::factor`], which a served schema goes through.
/// Each node is paid from `budget` before it is made.
pub fn schema(
    ty: &Type,
    docs: Option<TypeDocs<'_>>,
    budget: &mut Budget,
) -> Result<Value, SchemaError> {
    budget.spend(1)?;
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
            json!({"type": "array", "items": schema(&list.ty(), docs.and_then(|d| d.element()), budget)?})
        }
        Type::FixedLengthList(list) => json!({
            "type": "array",
            "items": schema(&list.ty(), docs.and_then(|d| d.element()), budget)?,
            "minItems": list.len(),
            "maxItems": list.len(),
        }),
        Type::Map(map) => map_schema(&map.key(), &map.value(), docs, budget)?,
        Type::Tuple(tuple) => {
            let items = tuple
                .types()
                .enumerate()
                .map(|(i, t)| schema(&t, docs.and_then(|d| d.tuple_item(i)), budget))
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
            |name| docs.map(|d| d.field(name)).unwrap_or_default(),
            budget,
        )?,
        Type::Variant(variant) => {
            budget.spend_names(variant.cases().map(|case| case.name))?;
            distinct(variant.cases().map(|case| case.name))?;
            let cases = variant
                .cases()
                .map(|case| {
                    let (description, payload_docs) =
                        docs.map_or((None, None), |d| d.case(case.name));
                    let mut properties = Map::new();
                    properties.insert("tag".into(), json!({"const": json_name(case.name)}));
                    let mut required = vec!["tag"];
                    if let Some(payload) = &case.ty {
                        properties.insert("value".into(), schema(payload, payload_docs, budget)?);
                        required.push("value");
                    }
                    let mut case_schema = json!({
                        "type": "object",
                        "properties": properties,
                        "required": required,
                        "additionalProperties": false,
                    });
                    describe(&mut case_schema, description.as_deref(), budget)?;
                    Ok::<_, SchemaError>(case_schema)
                })
                .collect::<Result<Vec<_>, _>>()?;
            json!({"oneOf": cases})
        }
        Type::Enum(enum_) => {
            budget.spend_names(enum_.names())?;
            let names = distinct(enum_.names())?;
            let mut schema = json!({"type": "string", "enum": names});
            // JSON Schema has no place for one enum value's comment: list them in the description.
            let cases: Vec<String> = names
                .iter()
                .zip(enum_.names())
                .filter_map(|(name, wit)| {
                    let (doc, _) = docs?.case(wit);
                    Some(format!("`{name}`: {}", doc?.trim()))
                })
                .collect();
            budget.spend_names(cases.iter().map(String::as_str))?;
            if !cases.is_empty() {
                let intro = docs.and_then(|d| d.description());
                let text = intro
                    .into_iter()
                    .map(|intro| intro.trim().to_string())
                    .chain(cases)
                    .collect::<Vec<_>>();
                schema["description"] = text.join("\n").into();
            }
            schema
        }
        Type::Option(option) => {
            let inner = option.ty();
            let inner_schema = schema(&inner, docs.and_then(|d| d.element()), budget)?;
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
            let mut arm = |name: &str, ty: Option<Type>, docs| -> Result<Value, SchemaError> {
                let payload = match ty {
                    Some(ty) => schema(&ty, docs, budget)?,
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
            budget.spend_names(flags.names())?;
            let names = distinct(flags.names())?;
            json!({"type": "array", "items": {"enum": names}, "uniqueItems": true})
        }
        Type::Own(_) | Type::Borrow(_) => return Err(Unsupported("resource").into()),
        Type::Future(_) => return Err(Unsupported("future").into()),
        Type::Stream(_) => return Err(Unsupported("stream").into()),
        Type::ErrorContext => return Err(Unsupported("error-context").into()),
    };
    describe(
        &mut schema,
        docs.and_then(|d| d.description()).as_deref(),
        budget,
    )?;
    // A named type may become a shared definition (see `crate::wit::defs`).
    let named = matches!(
        ty,
        Type::Record(_) | Type::Variant(_) | Type::Enum(_) | Type::Flags(_)
    );
    if let (true, Some(name), Some(object)) =
        (named, docs.and_then(|d| d.name()), schema.as_object_mut())
    {
        object.insert(defs::MARK.into(), name.into());
    }
    Ok(schema)
}

/// A closed object with one property per named field (by its JSON name); fields of `option`
/// type may be left out.
pub fn object_schema<'a, 'd>(
    fields: impl Iterator<Item = (&'a str, Type)>,
    docs_of: impl Fn(&str) -> FieldDocs<'d>,
    budget: &mut Budget,
) -> Result<Value, SchemaError> {
    let mut properties = Map::new();
    let mut required = Vec::new();
    for (name, ty) in fields {
        budget.spend_text(name)?;
        let json = json_name(name).into_owned();
        if properties.contains_key(&json) {
            return Err(clash(&json));
        }
        let docs = docs_of(name);
        let mut field_schema = schema(&ty, docs.ty, budget)?;
        // A field's own comment says more about it than its type's comment.
        if let Some(description) = docs.description {
            budget.spend_text(&description)?;
            field_schema["description"] = description.trim().into();
        }
        if let Some(keywords) = docs.constraints {
            budget.spend_text(keywords)?;
            constraints::narrow(&mut field_schema, &ty, keywords)
                .map_err(|why| SchemaError::Invalid(format!("`{name}`: {why}")))?;
            budget.narrowed = true;
        }
        if !matches!(ty, Type::Option(_)) {
            required.push(json.clone());
        }
        properties.insert(json, field_schema);
    }
    Ok(json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    }))
}

/// The JSON names of a type's cases or flags, refused when two are one.
fn distinct<'a>(names: impl Iterator<Item = &'a str>) -> Result<Vec<String>, SchemaError> {
    let mut seen: Vec<String> = Vec::new();
    for name in names {
        let json = json_name(name).into_owned();
        if seen.contains(&json) {
            return Err(clash(&json));
        }
        seen.push(json);
    }
    Ok(seen)
}

fn clash(json: &str) -> SchemaError {
    SchemaError::Invalid(format!(
        "two of its WIT names are both `{json}` in JSON (rename one)"
    ))
}

fn map_schema(
    key: &Type,
    value: &Type,
    docs: Option<TypeDocs<'_>>,
    budget: &mut Budget,
) -> Result<Value, SchemaError> {
    let value_schema = schema(value, docs.and_then(|d| d.map_value()), budget)?;
    Ok(if matches!(key, Type::String) {
        json!({"type": "object", "additionalProperties": value_schema})
    } else {
        json!({"type": "array", "items": {
            "type": "array",
            "prefixItems": [schema(key, None, budget)?, value_schema],
            "items": false,
            "minItems": 2,
            "maxItems": 2,
        }})
    })
}

fn describe(
    schema: &mut Value,
    description: Option<&str>,
    budget: &mut Budget,
) -> Result<(), SchemaError> {
    if let (Some(description), Some(object)) = (description, schema.as_object_mut())
        && !object.contains_key("description")
    {
        budget.spend_text(description)?;
        object.insert("description".into(), description.trim().into());
    }
    Ok(())
}

/// An integer bound as a JSON number: exact, since serde_json keeps 64-bit integers whole.
fn number(n: i128) -> Value {
    match (i64::try_from(n), u64::try_from(n)) {
        (Ok(n), _) => n.into(),
        (_, Ok(n)) => n.into(),
        _ => unreachable!("WIT integers fit in 64 bits"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_meet_in_json_are_refused() {
        assert_eq!(
            distinct(["on-foot", "by-train"].into_iter()).unwrap(),
            ["onFoot", "byTrain"]
        );
        // WIT words may be all upper case: `a-B` and `a-b` are both `aB`.
        let Err(SchemaError::Invalid(why)) = distinct(["a-b", "a-B"].into_iter()) else {
            panic!("a clash was let through");
        };
        assert!(why.contains("`aB`"), "{why}");
    }
}
