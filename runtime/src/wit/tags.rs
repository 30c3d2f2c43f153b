//! What a tool's doc tags say beyond its description:
//!
//! * `@title Text`: the tool's display title;
//! * `@read-only`, `@destructive`, `@idempotent`, `@open-world` (optionally `true` or `false`):
//!   MCP's tool annotations, hints for the client;
//! * `@header PARAM NAME`: the client mirrors parameter `PARAM` (a string, number or boolean)
//!   into the HTTP header `Mcp-Param-NAME`, which moat then checks against the body;
//! * `@schema PARAM {…}`: JSON Schema keywords that narrow the parameter (see
//!   [`crate::wit::constraints`]);
//! * `@task required`: the tool only runs as a task (see `moat:plugin/tasks`), so a client that
//!   does not follow tasks is refused; `@task` or `@task optional` says it may.

use std::collections::BTreeSet;

use rmcp::model::{JsonObject, ToolAnnotations};
use serde_json::Value;

use crate::wit::docs::FunctionDocs;
use crate::wit::naming::json_name;

/// The tool's title and annotations, if its docs give any.
pub fn annotations(
    docs: Option<FunctionDocs<'_>>,
) -> Result<(Option<String>, Option<ToolAnnotations>), String> {
    let Some(docs) = docs else {
        return Ok((None, None));
    };
    let title = docs
        .tag("title")
        .filter(|t| !t.is_empty())
        .map(str::to_string);
    let hint = |tag: &str| -> Result<Option<bool>, String> {
        match docs.tag(tag) {
            None => Ok(None),
            Some("" | "true") => Ok(Some(true)),
            Some("false") => Ok(Some(false)),
            Some(other) => Err(format!(
                "@{tag} takes `true`, `false` or nothing, not \"{other}\""
            )),
        }
    };
    let mut annotations = ToolAnnotations::new();
    annotations.read_only_hint = hint("read-only")?;
    annotations.destructive_hint = hint("destructive")?;
    annotations.idempotent_hint = hint("idempotent")?;
    annotations.open_world_hint = hint("open-world")?;
    let any = annotations.read_only_hint.is_some()
        || annotations.destructive_hint.is_some()
        || annotations.idempotent_hint.is_some()
        || annotations.open_world_hint.is_some();
    Ok((title, any.then_some(annotations)))
}

/// Marks each parameter a `@header` tag names with `x-mcp-header` in `input`.
pub fn mirror_headers(
    input: &mut JsonObject,
    docs: Option<FunctionDocs<'_>>,
) -> Result<(), String> {
    let Some(docs) = docs else { return Ok(()) };
    let mut seen = BTreeSet::new();
    for value in docs.tags("header") {
        let Some((param, header)) = value.split_once(char::is_whitespace) else {
            return Err(format!(
                "@header wants a parameter and a header name, not \"{value}\""
            ));
        };
        let header = header.trim();
        let token = !header.is_empty()
            && header
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
        if !token {
            return Err(format!(
                "@header name \"{header}\" is not an HTTP header name"
            ));
        }
        if !seen.insert(header.to_ascii_lowercase()) {
            return Err(format!("@header name \"{header}\" is given twice"));
        }
        let property = input
            .get_mut("properties")
            .and_then(|p| p.get_mut(json_name(param).as_ref()))
            .and_then(Value::as_object_mut)
            .ok_or_else(|| format!("@header names \"{param}\", which is no parameter"))?;
        let primitive = matches!(
            property.get("type").and_then(Value::as_str),
            Some("string" | "integer" | "number" | "boolean")
        );
        if !primitive {
            return Err(format!(
                "@header parameter \"{param}\" must be a string, a number or a boolean"
            ));
        }
        property.insert("x-mcp-header".into(), header.into());
    }
    Ok(())
}

/// Whether the tool's docs say `@task required`.
pub fn task_required(docs: Option<FunctionDocs<'_>>) -> Result<bool, String> {
    match docs.and_then(|d| d.tag("task")) {
        None | Some("" | "optional") => Ok(false),
        Some("required") => Ok(true),
        Some(other) => Err(format!(
            "@task takes `optional` or `required`, not \"{other}\""
        )),
    }
}
