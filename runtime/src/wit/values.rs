//! JSON ⇄ component values, following the mapping in [`crate::wit::schema`].
//!
//! [`from_json`] is the validator: it checks every value against the WIT type before any guest
//! code runs, and a mismatch names the path and what was expected, for example
//! `query.limit: expected integer 0..=4294967295, got -1`.

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;

use serde_json::{Map, Number, Value};
use wasmtime::component::{Type, Val};

use crate::wit::naming::json_name;
use crate::wit::schema::integer_range;

/// An argument that does not fit its type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgError {
    /// Where, as `param.field[2].field`; `arguments` for the object of all arguments.
    pub path: String,
    pub message: String,
}

impl fmt::Display for ArgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

impl std::error::Error for ArgError {}

/// Converts a tool call's arguments into the parameters of `params`, in order.
pub fn args_from_json(
    params: &[(String, Type)],
    args: Option<&Map<String, Value>>,
) -> Result<Vec<Val>, ArgError> {
    let empty = Map::new();
    let args = args.unwrap_or(&empty);
    let mut path = Path::root("arguments");
    let names: Vec<Cow<str>> = params.iter().map(|(n, _)| json_name(n)).collect();
    reject_unknown_keys(args, &names, &path)?;
    params
        .iter()
        .zip(&names)
        .map(|((_, ty), name)| {
            path.push_field(name);
            let val = field_from_json(ty, args.get(name.as_ref()), &path);
            path.pop();
            val
        })
        .collect()
}

/// Converts `value` into a value of `ty`.
pub fn from_json(ty: &Type, value: &Value) -> Result<Val, ArgError> {
    convert(ty, value, &mut Path::root("value"))
}

/// A record field or parameter: may be absent exactly when its type is an `option`.
fn field_from_json(ty: &Type, value: Option<&Value>, path: &Path) -> Result<Val, ArgError> {
    match (value, ty) {
        (Some(value), _) => convert(ty, value, &mut path.clone()),
        (None, Type::Option(_)) => Ok(Val::Option(None)),
        (None, _) => Err(path.error("missing required value".into())),
    }
}

fn convert(ty: &Type, value: &Value, path: &mut Path) -> Result<Val, ArgError> {
    let mismatch = |expected: &str| path.error(format!("expected {expected}, got {}", show(value)));
    Ok(match ty {
        Type::Bool => Val::Bool(value.as_bool().ok_or_else(|| mismatch("boolean"))?),
        Type::U8
        | Type::U16
        | Type::U32
        | Type::U64
        | Type::S8
        | Type::S16
        | Type::S32
        | Type::S64 => {
            let (min, max) = integer_range(ty).expect("an integer type");
            let n = integer(value)
                .filter(|n| (min..=max).contains(n))
                .ok_or_else(|| mismatch(&format!("integer {min}..={max}")))?;
            // The range check above makes every conversion below exact.
            match ty {
                Type::U8 => Val::U8(n as u8),
                Type::U16 => Val::U16(n as u16),
                Type::U32 => Val::U32(n as u32),
                Type::U64 => Val::U64(n as u64),
                Type::S8 => Val::S8(n as i8),
                Type::S16 => Val::S16(n as i16),
                Type::S32 => Val::S32(n as i32),
                _ => Val::S64(n as i64),
            }
        }
        Type::Float32 => {
            let n = value
                .as_f64()
                .filter(|n| n.abs() <= f64::from(f32::MAX))
                .ok_or_else(|| mismatch("number within the range of f32"))?;
            Val::Float32(n as f32)
        }
        Type::Float64 => Val::Float64(value.as_f64().ok_or_else(|| mismatch("number"))?),
        Type::Char => {
            let s = value
                .as_str()
                .ok_or_else(|| mismatch("a string of one character"))?;
            let mut chars = s.chars();
            match (chars.next(), chars.next()) {
                (Some(c), None) => Val::Char(c),
                _ => return Err(mismatch("a string of one character")),
            }
        }
        Type::String => Val::String(value.as_str().ok_or_else(|| mismatch("string"))?.into()),
        Type::List(list) => {
            let items = value.as_array().ok_or_else(|| mismatch("array"))?;
            Val::List(convert_items(&list.ty(), items, path)?)
        }
        Type::FixedLengthList(list) => {
            let expected = format!("array of {} items", list.len());
            let items = value
                .as_array()
                .filter(|items| items.len() == list.len() as usize)
                .ok_or_else(|| mismatch(&expected))?;
            Val::FixedLengthList(convert_items(&list.ty(), items, path)?)
        }
        Type::Tuple(tuple) => {
            let types: Vec<Type> = tuple.types().collect();
            let expected = format!("array of {} items", types.len());
            let items = value
                .as_array()
                .filter(|items| items.len() == types.len())
                .ok_or_else(|| mismatch(&expected))?;
            let mut vals = Vec::with_capacity(items.len());
            for (i, (ty, item)) in types.iter().zip(items).enumerate() {
                path.push_index(i);
                vals.push(convert(ty, item, path)?);
                path.pop();
            }
            Val::Tuple(vals)
        }
        Type::Record(record) => {
            let object = value.as_object().ok_or_else(|| mismatch("object"))?;
            let names: Vec<Cow<str>> = record.fields().map(|f| json_name(f.name)).collect();
            reject_unknown_keys(object, &names, path)?;
            let mut fields = Vec::new();
            for (field, name) in record.fields().zip(&names) {
                path.push_field(name);
                fields.push((
                    field.name.to_string(),
                    field_from_json(&field.ty, object.get(name.as_ref()), path)?,
                ));
                path.pop();
            }
            Val::Record(fields)
        }
        Type::Variant(variant) => {
            let names: Vec<Cow<str>> = variant.cases().map(|c| json_name(c.name)).collect();
            let expected = format!(r#"object {{"tag": {}, "value": …}}"#, one_of(&names));
            let object = value.as_object().ok_or_else(|| mismatch(&expected))?;
            reject_unknown_keys(object, &["tag".into(), "value".into()], path)?;
            path.push_field("tag");
            let tag = object.get("tag").unwrap_or(&Value::Null);
            let case = variant
                .cases()
                .zip(&names)
                .find_map(|(c, name)| (tag.as_str() == Some(name)).then_some(c))
                .ok_or_else(|| {
                    path.error(format!("expected {}, got {}", one_of(&names), show(tag)))
                })?;
            path.pop();
            path.push_field("value");
            let payload = match (&case.ty, object.get("value")) {
                (Some(ty), Some(value)) => Some(Box::new(convert(ty, value, path)?)),
                (Some(_), None) => {
                    return Err(path.error(format!("case \"{}\" needs a value", case.name)));
                }
                (None, Some(_)) => {
                    return Err(path.error(format!("case \"{}\" takes no value", case.name)));
                }
                (None, None) => None,
            };
            path.pop();
            Val::Variant(case.name.to_string(), payload)
        }
        Type::Enum(enum_) => {
            let names: Vec<Cow<str>> = enum_.names().map(json_name).collect();
            let name = value
                .as_str()
                .and_then(|s| enum_.names().zip(&names).find(|(_, json)| *json == s))
                .map(|(wit, _)| wit)
                .ok_or_else(|| mismatch(&one_of(&names)))?;
            Val::Enum(name.to_string())
        }
        Type::Option(option) => {
            let inner = option.ty();
            match value {
                Value::Null => Val::Option(None),
                _ if matches!(inner, Type::Option(_)) => {
                    let object = value
                        .as_object()
                        .filter(|o| o.len() == 1 && o.contains_key("some"))
                        .ok_or_else(|| mismatch(r#"null or {"some": …}"#))?;
                    path.push_field("some");
                    let val = convert(&inner, &object["some"], path)?;
                    path.pop();
                    Val::Option(Some(Box::new(val)))
                }
                _ => Val::Option(Some(Box::new(convert(&inner, value, path)?))),
            }
        }
        Type::Result(result) => {
            let (arm, payload) = value
                .as_object()
                .filter(|o| o.len() == 1)
                .and_then(|o| o.iter().next())
                .filter(|(arm, _)| *arm == "ok" || *arm == "err")
                .ok_or_else(|| mismatch(r#"{"ok": …} or {"err": …}"#))?;
            let ty = if arm == "ok" {
                result.ok()
            } else {
                result.err()
            };
            path.push_field(arm);
            let val = match ty {
                Some(ty) => Some(Box::new(convert(&ty, payload, path)?)),
                None if payload.is_null() => None,
                None => return Err(path.error(format!("expected null, got {}", show(payload)))),
            };
            path.pop();
            Val::Result(if arm == "ok" { Ok(val) } else { Err(val) })
        }
        Type::Flags(flags) => {
            let names: Vec<Cow<str>> = flags.names().map(json_name).collect();
            let items = value
                .as_array()
                .ok_or_else(|| mismatch("array of flag names"))?;
            let mut seen = HashSet::new();
            for (i, item) in items.iter().enumerate() {
                path.push_index(i);
                match item.as_str().filter(|s| names.iter().any(|n| n == s)) {
                    Some(name) if seen.insert(name) => {}
                    Some(name) => return Err(path.error(format!("flag \"{name}\" given twice"))),
                    None => {
                        return Err(path.error(format!(
                            "expected {}, got {}",
                            one_of(&names),
                            show(item)
                        )));
                    }
                }
                path.pop();
            }
            // Declaration order, whatever order the caller used.
            Val::Flags(
                flags
                    .names()
                    .zip(&names)
                    .filter(|(_, json)| seen.contains(json.as_ref()))
                    .map(|(wit, _)| wit.to_string())
                    .collect(),
            )
        }
        Type::Map(map) => {
            let (key_ty, value_ty) = (map.key(), map.value());
            let mut entries = Vec::new();
            if matches!(key_ty, Type::String) {
                let object = value.as_object().ok_or_else(|| mismatch("object"))?;
                for (key, item) in object {
                    path.push_key(key);
                    entries.push((Val::String(key.clone()), convert(&value_ty, item, path)?));
                    path.pop();
                }
            } else {
                let pairs = value
                    .as_array()
                    .ok_or_else(|| mismatch("array of [key, value] pairs"))?;
                for (i, pair) in pairs.iter().enumerate() {
                    path.push_index(i);
                    let Some([key, item]) = pair.as_array().map(Vec::as_slice) else {
                        return Err(
                            path.error(format!("expected a [key, value] pair, got {}", show(pair)))
                        );
                    };
                    path.push_index(0);
                    let key = convert(&key_ty, key, path)?;
                    path.pop();
                    path.push_index(1);
                    let item = convert(&value_ty, item, path)?;
                    path.pop();
                    path.pop();
                    entries.push((key, item));
                }
            }
            Val::Map(entries)
        }
        Type::Own(_) | Type::Borrow(_) | Type::Future(_) | Type::Stream(_) | Type::ErrorContext => {
            return Err(path.error("this type has no JSON form".into()));
        }
    })
}

fn convert_items(ty: &Type, items: &[Value], path: &mut Path) -> Result<Vec<Val>, ArgError> {
    let mut vals = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        path.push_index(i);
        vals.push(convert(ty, item, path)?);
        path.pop();
    }
    Ok(vals)
}

/// The value of a JSON number that is an integer; `3.0` counts, as JSON Schema says it does.
fn integer(value: &Value) -> Option<i128> {
    let n = value.as_number()?;
    if let Some(i) = n.as_i64() {
        return Some(i.into());
    }
    if let Some(u) = n.as_u64() {
        return Some(u.into());
    }
    let f = n.as_f64()?;
    // From 2^53 on a double has lost digits (`9007199254740993.0` reads as 2^53): refuse to guess
    // which integer was meant.
    (f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0).then_some(f as i128)
}

fn reject_unknown_keys(
    object: &Map<String, Value>,
    known: &[Cow<str>],
    path: &Path,
) -> Result<(), ArgError> {
    for key in object.keys() {
        if !known.iter().any(|k| k == key) {
            // `old_text` or `old-text` for `oldText`: name the spelling the schema has.
            let loose = |name: &str| name.replace(['-', '_'], "").to_ascii_lowercase();
            if let Some(meant) = known.iter().find(|k| loose(k) == loose(key)) {
                return Err(path.error(format!(
                    "unknown field \"{key}\" (the field is spelt \"{meant}\")"
                )));
            }
            let expected = if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            };
            return Err(path.error(format!("unknown field \"{key}\" (expected: {expected})")));
        }
    }
    Ok(())
}

/// Converts a value of `ty` to JSON. Fails only on a non-finite float, which JSON cannot carry.
pub fn to_json(ty: &Type, val: &Val) -> Result<Value, ArgError> {
    to_json_at(ty, val, &mut Path::root("result"))
}

fn to_json_at(ty: &Type, val: &Val, path: &mut Path) -> Result<Value, ArgError> {
    Ok(match (ty, val) {
        (_, Val::Bool(b)) => Value::Bool(*b),
        (_, Val::U8(n)) => (*n).into(),
        (_, Val::U16(n)) => (*n).into(),
        (_, Val::U32(n)) => (*n).into(),
        (_, Val::U64(n)) => (*n).into(),
        (_, Val::S8(n)) => (*n).into(),
        (_, Val::S16(n)) => (*n).into(),
        (_, Val::S32(n)) => (*n).into(),
        (_, Val::S64(n)) => (*n).into(),
        (_, Val::Float32(n)) => float(f64::from(*n), path)?,
        (_, Val::Float64(n)) => float(*n, path)?,
        (_, Val::Char(c)) => Value::String(c.to_string()),
        (_, Val::String(s)) => Value::String(s.clone()),
        (Type::List(list), Val::List(items)) => items_to_json(&list.ty(), items, path)?,
        (Type::FixedLengthList(list), Val::FixedLengthList(items)) => {
            items_to_json(&list.ty(), items, path)?
        }
        (Type::Tuple(tuple), Val::Tuple(items)) => {
            let mut out = Vec::with_capacity(items.len());
            for (i, (ty, item)) in tuple.types().zip(items).enumerate() {
                path.push_index(i);
                out.push(to_json_at(&ty, item, path)?);
                path.pop();
            }
            Value::Array(out)
        }
        (Type::Record(record), Val::Record(fields)) => {
            let mut out = Map::new();
            for (field, (name, item)) in record.fields().zip(fields) {
                let name = json_name(name);
                path.push_field(&name);
                out.insert(name.into_owned(), to_json_at(&field.ty, item, path)?);
                path.pop();
            }
            Value::Object(out)
        }
        (Type::Variant(variant), Val::Variant(name, payload)) => {
            let mut out = Map::new();
            out.insert("tag".into(), json_name(name).into_owned().into());
            let case_ty = variant.cases().find(|c| c.name == name).and_then(|c| c.ty);
            if let (Some(ty), Some(payload)) = (case_ty, payload) {
                path.push_field("value");
                out.insert("value".into(), to_json_at(&ty, payload, path)?);
                path.pop();
            }
            Value::Object(out)
        }
        (_, Val::Enum(name)) => json_name(name).into_owned().into(),
        (Type::Option(option), Val::Option(inner)) => match inner {
            None => Value::Null,
            Some(inner) => {
                let inner_ty = option.ty();
                let json = to_json_at(&inner_ty, inner, path)?;
                if matches!(inner_ty, Type::Option(_)) {
                    serde_json::json!({ "some": json })
                } else {
                    json
                }
            }
        },
        (Type::Result(result), Val::Result(outcome)) => {
            let (arm, ty, payload) = match outcome {
                Ok(payload) => ("ok", result.ok(), payload),
                Err(payload) => ("err", result.err(), payload),
            };
            path.push_field(arm);
            let json = match (ty, payload) {
                (Some(ty), Some(payload)) => to_json_at(&ty, payload, path)?,
                _ => Value::Null,
            };
            path.pop();
            serde_json::json!({ arm: json })
        }
        (_, Val::Flags(names)) => Value::Array(
            names
                .iter()
                .map(|name| json_name(name).into_owned().into())
                .collect(),
        ),
        (Type::Map(map), Val::Map(entries)) => {
            let (key_ty, value_ty) = (map.key(), map.value());
            if matches!(key_ty, Type::String) {
                let mut out = Map::new();
                for (key, item) in entries {
                    let Val::String(key) = key else { continue };
                    path.push_field(key);
                    out.insert(key.clone(), to_json_at(&value_ty, item, path)?);
                    path.pop();
                }
                Value::Object(out)
            } else {
                let mut out = Vec::with_capacity(entries.len());
                for (i, (key, item)) in entries.iter().enumerate() {
                    path.push_index(i);
                    let pair = vec![
                        to_json_at(&key_ty, key, path)?,
                        to_json_at(&value_ty, item, path)?,
                    ];
                    path.pop();
                    out.push(Value::Array(pair));
                }
                Value::Array(out)
            }
        }
        _ => return Err(path.error("this value has no JSON form".into())),
    })
}

fn items_to_json(ty: &Type, items: &[Val], path: &mut Path) -> Result<Value, ArgError> {
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        path.push_index(i);
        out.push(to_json_at(ty, item, path)?);
        path.pop();
    }
    Ok(Value::Array(out))
}

fn float(n: f64, path: &Path) -> Result<Value, ArgError> {
    Number::from_f64(n)
        .map(Value::Number)
        .ok_or_else(|| path.error(format!("{n} cannot be written as JSON")))
}

/// `"a", "b" or "c"`, for messages.
fn one_of(names: &[Cow<str>]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("\"{n}\"")).collect();
    match quoted.as_slice() {
        [] => "nothing".into(),
        [one] => one.clone(),
        [init @ .., last] => format!("one of {}, {last}", init.join(", ")),
    }
}

/// A short rendering of a JSON value for error messages.
fn show(value: &Value) -> String {
    match value {
        Value::String(s) if s.chars().count() > 40 => {
            let head: String = s.chars().take(40).collect();
            format!("\"{head}…\"")
        }
        Value::Array(_) => "an array".into(),
        Value::Object(_) => "an object".into(),
        other => other.to_string(),
    }
}

/// A location inside the arguments, for error messages: `param.field[2]`, or the root's name.
#[derive(Clone)]
struct Path {
    root: &'static str,
    segments: Vec<Segment>,
}

#[derive(Clone)]
enum Segment {
    Field(String),
    Index(usize),
    /// A key of a `map<string, V>`: the caller's text, which may be empty or hold `.` and `[`.
    Key(String),
}

impl Path {
    fn root(root: &'static str) -> Self {
        Self {
            root,
            segments: Vec::new(),
        }
    }

    fn push_field(&mut self, name: &str) {
        self.segments.push(Segment::Field(name.into()));
    }

    fn push_index(&mut self, index: usize) {
        self.segments.push(Segment::Index(index));
    }

    fn push_key(&mut self, key: &str) {
        self.segments.push(Segment::Key(key.into()));
    }

    fn pop(&mut self) {
        self.segments.pop();
    }

    fn error(&self, message: String) -> ArgError {
        ArgError {
            path: self.to_string(),
            message,
        }
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.segments.first() {
            None | Some(Segment::Index(_) | Segment::Key(_)) => write!(f, "{}", self.root)?,
            Some(Segment::Field(_)) => {}
        }
        for (i, segment) in self.segments.iter().enumerate() {
            match segment {
                Segment::Field(name) if i == 0 => write!(f, "{name}")?,
                Segment::Field(name) => write!(f, ".{name}")?,
                Segment::Index(index) => write!(f, "[{index}]")?,
                Segment::Key(key) => write!(f, "[{}]", Value::String(key.clone()))?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A map key is quoted, so that an empty key or one holding `.` still names a place (an
    /// empty key once made the whole path empty).
    #[test]
    fn map_keys_are_quoted_in_paths() {
        let mut path = Path::root("value");
        path.push_key("");
        assert_eq!(path.to_string(), r#"value[""]"#);
        let mut path = Path::root("arguments");
        path.push_field("counts");
        path.push_key("a.b");
        path.push_index(2);
        assert_eq!(path.to_string(), r#"counts["a.b"][2]"#);
    }
}
