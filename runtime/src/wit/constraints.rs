//! What WIT cannot say of a value: ranges, lengths, patterns, formats, defaults and examples,
//! declared by a `@schema {…}` doc tag (`@schema days {"minimum": 1, "maximum": 16}` in a
//! function's comment, `@schema {"maxLength": 64}` in a field's) and written into the schema.
//!
//! A keyword may only narrow what the type accepts: a range inside the integer type's own, a
//! length on a string, item counts on a list. A `default` or an example must itself be a valid
//! value, and a default only goes on an `option` (a field that may be left out). moat checks the
//! narrowed schema with the arguments before the guest runs (see `crate::plugin::call`).

use jsonschema::ValidationError;
use jsonschema::error::ValidationErrorKind;
use jsonschema::paths::LocationSegment;
use rmcp::model::JsonObject;
use serde_json::{Map, Value};
use wasmtime::component::Type;

use crate::wit::schema::integer_range;
use crate::wit::values::ArgError;

/// The keywords a `@schema` tag may give.
pub const KEYWORDS: [&str; 14] = [
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "pattern",
    "format",
    "minItems",
    "maxItems",
    "uniqueItems",
    "default",
    "examples",
];

/// The `format`s JSON Schema 2020-12 defines, which moat checks.
const FORMATS: [&str; 19] = [
    "date-time",
    "date",
    "time",
    "duration",
    "email",
    "idn-email",
    "hostname",
    "idn-hostname",
    "ipv4",
    "ipv6",
    "uri",
    "uri-reference",
    "iri",
    "iri-reference",
    "uuid",
    "uri-template",
    "json-pointer",
    "relative-json-pointer",
    "regex",
];

/// What kind of value the keywords apply to.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Integer(i128, i128),
    Number,
    String,
    List,
    Other,
}

fn kind(ty: &Type) -> Kind {
    match ty {
        Type::Float32 | Type::Float64 => Kind::Number,
        Type::String => Kind::String,
        Type::List(_) => Kind::List,
        ty => match integer_range(ty) {
            Some((min, max)) => Kind::Integer(min, max),
            None => Kind::Other,
        },
    }
}

/// Narrows `schema`, the schema of a field or parameter of type `ty`, by the JSON object
/// `keywords`; the error says which keyword is wrong and why.
pub fn narrow(schema: &mut Value, ty: &Type, keywords: &str) -> Result<(), String> {
    let keywords: Map<String, Value> = serde_json::from_str(keywords)
        .map_err(|e| format!("@schema wants a JSON object of keywords ({e})"))?;
    // An `option<T>` is `{"anyOf": [T, null]}`: the value's keywords go on `T`, a default on the
    // whole.
    let (inner_ty, optional) = match ty {
        Type::Option(option) if !matches!(option.ty(), Type::Option(_)) => (option.ty(), true),
        ty => (ty.clone(), false),
    };
    let kind = kind(&inner_ty);
    for (keyword, value) in &keywords {
        check(keyword, value, kind, optional)?;
        let target = match (optional, keyword.as_str()) {
            (_, "default" | "examples") | (false, _) => &mut *schema,
            (true, _) => &mut schema["anyOf"][0],
        };
        target[keyword.as_str()] = value.clone();
    }
    let value_schema = if optional {
        &schema["anyOf"][0]
    } else {
        &*schema
    };
    for (low, high) in [
        ("minimum", "maximum"),
        ("minLength", "maxLength"),
        ("minItems", "maxItems"),
    ] {
        let bound = |k| value_schema.get(k).and_then(Value::as_f64);
        if let (Some(low_value), Some(high_value)) = (bound(low), bound(high))
            && low_value > high_value
        {
            return Err(format!("@schema's {low} is above its {high}"));
        }
    }
    let validator = jsonschema::options()
        .should_validate_formats(true)
        .build(schema)
        .map_err(|e| format!("@schema makes an invalid schema: {e}"))?;
    for (keyword, value) in &keywords {
        let values: &[Value] = match (keyword.as_str(), value) {
            ("default", value) => std::slice::from_ref(value),
            ("examples", Value::Array(examples)) => examples,
            _ => continue,
        };
        for value in values {
            if let Some(error) = validator.iter_errors(value).next() {
                return Err(format!(
                    "@schema's {keyword} {value} is not a valid value: {error}"
                ));
            }
        }
    }
    Ok(())
}

/// Checks one keyword against the kind of value it narrows.
fn check(keyword: &str, value: &Value, kind: Kind, optional: bool) -> Result<(), String> {
    let wrong_type = |what: &str| Err(format!("@schema's {keyword} applies to {what} only"));
    let count = || {
        value
            .as_u64()
            .map(|_| ())
            .ok_or_else(|| format!("@schema's {keyword} must be a whole number ≥ 0"))
    };
    match keyword {
        "minimum" | "maximum" | "exclusiveMinimum" | "exclusiveMaximum" | "multipleOf" => {
            let Some(n) = value.as_f64() else {
                return Err(format!("@schema's {keyword} must be a number"));
            };
            match kind {
                Kind::Integer(min, max) => {
                    // Compared as the type's exact bounds: a double holds every i64/u64 bound
                    // closely enough to tell inside from outside.
                    if keyword != "multipleOf" && !(min as f64 <= n && n <= max as f64) {
                        return Err(format!(
                            "@schema's {keyword} {value} is outside the type's own range \
                             {min}..={max}"
                        ));
                    }
                }
                Kind::Number => {}
                _ => return wrong_type("numbers"),
            }
            if keyword == "multipleOf" && n <= 0.0 {
                return Err("@schema's multipleOf must be above 0".into());
            }
            Ok(())
        }
        "minLength" | "maxLength" | "pattern" | "format" if kind != Kind::String => {
            wrong_type("strings")
        }
        "minLength" | "maxLength" => count(),
        "pattern" => value
            .as_str()
            .map(|_| ())
            .ok_or_else(|| "@schema's pattern must be a string".into()),
        "format" => match value.as_str() {
            Some(format) if FORMATS.contains(&format) => Ok(()),
            _ => Err(format!(
                "@schema's format {value} is none of JSON Schema's: {}",
                FORMATS.join(", ")
            )),
        },
        "minItems" | "maxItems" | "uniqueItems" if kind != Kind::List => wrong_type("lists"),
        "minItems" | "maxItems" => count(),
        "uniqueItems" => value
            .as_bool()
            .map(|_| ())
            .ok_or_else(|| "@schema's uniqueItems must be true or false".into()),
        "default" if !optional => Err(
            "@schema's default needs an option<…> type, so that the value may be left out".into(),
        ),
        "default" => Ok(()),
        "examples" => value
            .as_array()
            .map(|_| ())
            .ok_or_else(|| "@schema's examples must be an array of values".into()),
        other => Err(format!(
            "@schema does not take `{other}`; it takes {}",
            KEYWORDS.join(", ")
        )),
    }
}

/// The check of a tool's arguments against the keywords its `@schema` tags added, compiled once
/// when the plugin loads.
pub struct Check(jsonschema::Validator);

impl Check {
    /// Compiles the check of values of `schema`.
    pub fn new(schema: &JsonObject) -> Result<Self, String> {
        jsonschema::options()
            .should_validate_formats(true)
            .build(&Value::Object(schema.clone()))
            .map(Self)
            .map_err(|e| format!("its narrowed schema does not compile: {e}"))
    }

    /// The first keyword `arguments` break, as an [`ArgError`] at the value that breaks it.
    pub fn check(&self, arguments: &Value) -> Result<(), ArgError> {
        let Some(error) = self.0.iter_errors(arguments).next() else {
            return Ok(());
        };
        let error = innermost(&error);
        // Written as `wit::values` writes the path of a type mismatch: `options.label`.
        let mut path = String::new();
        for segment in error.instance_path().segments() {
            match segment {
                LocationSegment::Property(name) => {
                    if !path.is_empty() {
                        path.push('.');
                    }
                    path.push_str(&name);
                }
                LocationSegment::Index(index) => path.push_str(&format!("[{index}]")),
            }
        }
        if path.is_empty() {
            path.push_str("arguments");
        }
        Err(ArgError {
            path,
            message: error.to_string(),
        })
    }
}

/// The error under an `anyOf` or `oneOf` that says what is wrong: an `option<u8>` of 0 under
/// `{"minimum": 1}` breaks `anyOf` because it is below 1, not because it is not `null`. The
/// types were checked before, so the branch whose type matched holds the reason.
fn innermost<'e>(error: &'e ValidationError<'e>) -> &'e ValidationError<'e> {
    let (ValidationErrorKind::AnyOf { context } | ValidationErrorKind::OneOfNotValid { context }) =
        error.kind()
    else {
        return error;
    };
    context
        .iter()
        .flatten()
        .find(|e| !matches!(e.kind(), ValidationErrorKind::Type { .. }))
        .map_or(error, |inner| innermost(inner))
}

impl std::fmt::Debug for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Check")
    }
}
