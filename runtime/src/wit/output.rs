//! What a tool returns, as MCP sees it: the output schema, and the rendering of a returned value
//! into a `tools/call` result.
//!
//! * `result<T, E>`: `ok` is the tool's output; `err` is a tool error (`isError: true`), rendered
//!   as text: a string as it is, any other value as JSON.
//! * `content-block` or `list<content-block>` from `moat:plugin/content` (directly or as the `ok`
//!   of a result): MCP content blocks. The type is recognised by its shape, as component types
//!   carry no names.
//! * `string`: text content, nothing more (a string has no structure to give).
//! * Any other type `T`: `structuredContent`, with the same value as text content (a string as
//!   it is, anything else as JSON). A record is the structured content itself; other types are
//!   wrapped as `{"value": …}`, since MCP wants an object there.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use rmcp::model::{CallToolResult, ContentBlock, PromptMessage, ResourceContents, Role};
use serde_json::{Map, Value, json};
use wasmtime::component::{Type, Val};

use crate::wit::docs::TypeDocs;
use crate::wit::schema::{self, Budget, SchemaError};
use crate::wit::values::to_json;

/// The shape of a tool's return value.
#[derive(Clone, Debug)]
pub enum Returns {
    Nothing,
    Value(Payload),
    Result {
        ok: Option<Payload>,
        err: Option<Type>,
    },
}

/// A returned value, once any `result` is taken apart.
#[derive(Clone, Debug)]
pub enum Payload {
    Json(Type),
    Content,
    ContentList,
}

impl Returns {
    pub fn of(result: Option<Type>) -> Self {
        match result {
            None => Returns::Nothing,
            Some(Type::Result(result)) => Returns::Result {
                ok: result.ok().map(Payload::of),
                err: result.err(),
            },
            Some(ty) => Returns::Value(Payload::of(ty)),
        }
    }

    /// The tool's `outputSchema`, when it returns structured content, paid from `budget`: the
    /// exact shape of what it returns, without the comments. The prose is for the model, which
    /// reads what a tool returns, not its output schema; a client checks the shape. (It was half
    /// of what `tools/list` sent for the bundled plugins.)
    pub fn output_schema(
        &self,
        docs: Option<TypeDocs<'_>>,
        budget: &mut Budget,
    ) -> Result<Option<Value>, SchemaError> {
        let (payload, docs) = match self {
            Returns::Nothing => return Ok(None),
            Returns::Value(payload) => (payload, docs),
            Returns::Result { ok, err } => {
                if let Some(err) = err {
                    schema::schema(err, None, budget)?; // refuse an error type with no JSON form early
                }
                match ok {
                    Some(payload) => (payload, docs.and_then(|d| d.result_arms().0)),
                    None => return Ok(None),
                }
            }
        };
        let Payload::Json(ty) = payload else {
            return Ok(None);
        };
        if matches!(ty, Type::String) {
            return Ok(None);
        }
        let mut inner = schema::schema(ty, docs, budget)?;
        without_descriptions(&mut inner);
        Ok(Some(if matches!(ty, Type::Record(_)) {
            inner
        } else {
            json!({
                "type": "object",
                "properties": {"value": inner},
                "required": ["value"],
                "additionalProperties": false,
            })
        }))
    }

    /// Renders the value a call returned.
    pub fn render(&self, val: Option<&Val>) -> Result<CallToolResult, String> {
        match (self, val) {
            (Returns::Nothing, _) => Ok(CallToolResult::success(Vec::new())),
            (Returns::Value(payload), Some(val)) => payload.render(val),
            (Returns::Result { ok, err }, Some(Val::Result(outcome))) => match (outcome, ok) {
                (Ok(Some(val)), Some(payload)) => payload.render(val),
                (Ok(_), _) => Ok(CallToolResult::success(Vec::new())),
                (Err(val), _) => {
                    let text = match (err, val) {
                        (Some(ty), Some(val)) => as_text(ty, val)?,
                        _ => "the tool failed without saying why".to_string(),
                    };
                    Ok(CallToolResult::error(vec![ContentBlock::text(text)]))
                }
            },
            _ => Err("the guest returned a value of the wrong shape".into()),
        }
    }
}

/// `schema` without its `description` keywords, at every depth (a property named `description`
/// stays, and so does any value in `default`, `const`…: they are not keywords).
fn without_descriptions(schema: &mut Value) {
    match schema {
        Value::Object(object) => {
            if object.get("description").is_some_and(Value::is_string) {
                object.remove("description");
            }
            for (key, value) in object.iter_mut() {
                match (key.as_str(), value) {
                    ("properties" | "$defs", Value::Object(map)) => {
                        map.values_mut().for_each(without_descriptions)
                    }
                    // Values, not schemas.
                    ("const" | "enum" | "default" | "examples", _) => {}
                    (_, value) => without_descriptions(value),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(without_descriptions),
        _ => {}
    }
}

impl Payload {
    fn of(ty: Type) -> Self {
        match &ty {
            ty if is_content_block(ty) => Payload::Content,
            Type::List(list) if is_content_block(&list.ty()) => Payload::ContentList,
            _ => Payload::Json(ty),
        }
    }

    fn render(&self, val: &Val) -> Result<CallToolResult, String> {
        match (self, val) {
            (Payload::Json(Type::String), Val::String(text)) => {
                Ok(CallToolResult::success(vec![ContentBlock::text(
                    text.clone(),
                )]))
            }
            (Payload::Json(ty), val) => {
                let json = to_json(ty, val).map_err(|e| e.to_string())?;
                let text = match &json {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                let structured = if matches!(ty, Type::Record(_)) {
                    json
                } else {
                    Value::Object(Map::from_iter([("value".to_string(), json)]))
                };
                let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
                result.structured_content = Some(structured);
                Ok(result)
            }
            (Payload::Content, block) => Ok(CallToolResult::success(vec![content_block(block)?])),
            (Payload::ContentList, Val::List(blocks)) => Ok(CallToolResult::success(
                blocks.iter().map(content_block).collect::<Result<_, _>>()?,
            )),
            _ => Err("the guest returned a value of the wrong shape".into()),
        }
    }
}

fn as_text(ty: &Type, val: &Val) -> Result<String, String> {
    match to_json(ty, val).map_err(|e| e.to_string())? {
        Value::String(s) => Ok(s),
        other => Ok(other.to_string()),
    }
}

/// Whether `ty` has the shape of `moat:plugin/content.content-block`.
pub fn is_content_block(ty: &Type) -> bool {
    let Type::Variant(variant) = ty else {
        return false;
    };
    let cases: Vec<(&str, Option<Type>)> = variant.cases().map(|c| (c.name, c.ty)).collect();
    let fields = |ty: &Option<Type>| -> Vec<String> {
        match ty {
            Some(Type::Record(r)) => r.fields().map(|f| f.name.to_string()).collect(),
            _ => Vec::new(),
        }
    };
    // moat 0.1.0 plugins built before embedded resources came have the first four cases only.
    let (head, resource) = match cases.as_slice() {
        [head @ .., ("resource", resource)] if head.len() == 4 => (head, Some(resource)),
        head => (head, None),
    };
    let known_head = matches!(
        head,
        [
            ("text", Some(Type::String)),
            ("image", image),
            ("audio", audio),
            ("resource-link", link),
        ] if fields(image) == ["data", "mime-type"]
            && fields(audio) == ["data", "mime-type"]
            && fields(link) == ["uri", "name", "description", "mime-type"]
    );
    known_head && resource.is_none_or(|r| fields(r) == ["uri", "mime-type", "body"])
}

/// Whether `ty` has the shape of `moat:plugin/content.body`: `text(string)` or `blob(list<u8>)`.
pub fn is_body(ty: &Type) -> bool {
    let Type::Variant(variant) = ty else {
        return false;
    };
    let cases: Vec<(&str, Option<Type>)> = variant.cases().map(|c| (c.name, c.ty)).collect();
    matches!(
        cases.as_slice(),
        [("text", Some(Type::String)), ("blob", Some(Type::List(bytes)))] if bytes.ty() == Type::U8
    )
}

/// One `content-block` value as an MCP content block.
pub fn content_block(val: &Val) -> Result<ContentBlock, String> {
    let Val::Variant(case, Some(payload)) = val else {
        return Err("malformed content block".into());
    };
    let field = |name: &str| match &**payload {
        Val::Record(fields) => fields.iter().find(|(n, _)| n == name).map(|(_, v)| v),
        _ => None,
    };
    let string = |name: &str| match field(name) {
        Some(Val::String(s)) => Some(s.clone()),
        Some(Val::Option(Some(inner))) => match &**inner {
            Val::String(s) => Some(s.clone()),
            _ => None,
        },
        _ => None,
    };
    let data = || match field("data") {
        Some(Val::List(bytes)) => bytes_of(bytes).map(|bytes| BASE64.encode(bytes)),
        _ => Err("malformed content data".to_string()),
    };
    let mime = || string("mime-type").unwrap_or_default();
    Ok(match (case.as_str(), &**payload) {
        ("text", Val::String(text)) => ContentBlock::text(text.clone()),
        ("image", _) => ContentBlock::image(data()?, mime()),
        ("audio", _) => ContentBlock::audio(data()?, mime()),
        ("resource-link", _) => {
            let mut link = json!({
                "type": "resource_link",
                "uri": string("uri").unwrap_or_default(),
                "name": string("name").unwrap_or_default(),
            });
            if let Some(description) = string("description") {
                link["description"] = description.into();
            }
            if let Some(mime) = string("mime-type") {
                link["mimeType"] = mime.into();
            }
            serde_json::from_value(link).map_err(|e| format!("malformed resource link: {e}"))?
        }
        ("resource", _) => {
            let uri = string("uri").unwrap_or_default();
            let body = field("body").ok_or("malformed embedded resource")?;
            ContentBlock::resource(resource_contents(uri, string("mime-type"), body)?)
        }
        _ => return Err(format!("unknown content block \"{case}\"")),
    })
}

/// A `body` value (or a bare `string` or `list<u8>`) as the contents of the resource `uri`.
pub fn resource_contents(
    uri: String,
    mime_type: Option<String>,
    body: &Val,
) -> Result<ResourceContents, String> {
    let contents = match body {
        Val::Variant(case, Some(inner)) if case == "text" || case == "blob" => {
            return resource_contents(uri, mime_type, inner);
        }
        Val::String(text) => ResourceContents::text(text.clone(), uri),
        Val::List(bytes) => ResourceContents::blob(BASE64.encode(bytes_of(bytes)?), uri),
        _ => return Err("malformed resource body".into()),
    };
    Ok(match mime_type {
        Some(mime) => contents.with_mime_type(mime),
        None => contents,
    })
}

fn bytes_of(list: &[Val]) -> Result<Vec<u8>, String> {
    list.iter()
        .map(|b| match b {
            Val::U8(b) => Ok(*b),
            _ => Err("malformed bytes".to_string()),
        })
        .collect()
}

/// Whether `ty` has the shape of `moat:plugin/prompt.message`.
pub fn is_prompt_message(ty: &Type) -> bool {
    let Type::Record(record) = ty else {
        return false;
    };
    let fields: Vec<(&str, Type)> = record.fields().map(|f| (f.name, f.ty)).collect();
    match fields.as_slice() {
        [("role", Type::Enum(role)), ("content", content)] => {
            role.names().eq(["user", "assistant"]) && is_content_block(content)
        }
        _ => false,
    }
}

/// A `list<message>` value as MCP prompt messages.
pub fn prompt_messages(val: &Val) -> Result<Vec<PromptMessage>, String> {
    let Val::List(messages) = val else {
        return Err("malformed prompt messages".into());
    };
    messages
        .iter()
        .map(|message| {
            let Val::Record(fields) = message else {
                return Err("malformed prompt message".to_string());
            };
            let role = match fields.iter().find(|(n, _)| n == "role") {
                Some((_, Val::Enum(role))) if role == "assistant" => Role::Assistant,
                Some((_, Val::Enum(_))) => Role::User,
                _ => return Err("malformed prompt message role".into()),
            };
            let content = fields
                .iter()
                .find(|(n, _)| n == "content")
                .ok_or("malformed prompt message")?;
            Ok(PromptMessage::new(role, content_block(&content.1)?))
        })
        .collect()
}
