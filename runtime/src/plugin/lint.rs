//! What in a plugin makes a model choose or call its tools wrong, as `moat lint` reports it: a
//! tool or parameter without a description, a limit stated in prose that the schema does not
//! enforce, a sibling named in a form the model does not know, a description that says what a
//! tool does but not when to use it, and missing behaviour hints. Heuristics over the text: a
//! finding is a question for the author, not proof of a fault.

use serde_json::Value;

use super::{Plugin, Tool};
use crate::wit::constraints::KEYWORDS;

/// One thing to look at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// What it is about: a tool, `tool.parameter`, a prompt or a resource.
    pub subject: String,
    pub message: String,
}

/// Words that tell the model when (or when not) to use a tool.
const WHEN_WORDS: [&str; 12] = [
    "use", "used", "using", "when", "whenever", "instead", "if", "unless", "before", "after",
    "only", "rather",
];

/// Words before a number that make it a limit.
const LIMIT_WORDS: [&str; 10] = [
    "most", "least", "up", "max", "maximum", "min", "minimum", "between", "than", "limit",
];

/// Words after which a bare one-word name reads as a reference to a function.
const REFERRING_WORDS: [&str; 8] = [
    "call", "calling", "use", "using", "see", "via", "with", "run",
];

/// Every finding for `plugin`, tools first, in name order.
pub fn lint(plugin: &Plugin) -> Vec<Finding> {
    let mut findings = Vec::new();
    for tool in &plugin.tools {
        lint_tool(plugin, tool, &mut findings);
    }
    for prompt in &plugin.prompts {
        if prompt.description.is_none() {
            findings.push(Finding {
                subject: prompt.name.clone(),
                message: "the prompt has no description".into(),
            });
        }
    }
    for resource in &plugin.resources {
        if resource.description.is_none() {
            findings.push(Finding {
                subject: resource.name.clone(),
                message: "the resource has no description".into(),
            });
        }
    }
    findings
}

fn lint_tool(plugin: &Plugin, tool: &Tool, findings: &mut Vec<Finding>) {
    let mut find = |subject: &str, message: String| {
        findings.push(Finding {
            subject: subject.to_string(),
            message,
        })
    };
    let name = tool.name.as_str();
    if !tool.documented {
        find(
            name,
            "the tool has no description (a `///` comment on its function)".into(),
        );
    } else if !words(&tool.description).any(|w| WHEN_WORDS.contains(&w.as_str())) {
        find(
            name,
            "the description says what the tool does but not when to use it (or when not)".into(),
        );
    }
    let hints = tool.annotations.as_ref();
    let read_only = hints.and_then(|h| h.read_only_hint);
    if read_only.is_none() {
        find(name, "no @read-only hint (true or false)".into());
    }
    if read_only != Some(true) && hints.and_then(|h| h.destructive_hint).is_none() {
        find(
            name,
            "no @destructive hint for a tool that may change things".into(),
        );
    }
    if hints.and_then(|h| h.open_world_hint).is_none() {
        find(
            name,
            "no @open-world hint (does it reach beyond its own data?)".into(),
        );
    }
    for (text, subject) in texts(tool) {
        let subject = subject.map_or(name.to_string(), |param| format!("{name}.{param}"));
        if let Some(word) = sibling_in_wit_form(plugin, &text) {
            find(
                &subject,
                format!(
                    "names `{word}` as WIT does; write it in backticks so moat gives the model its MCP name"
                ),
            );
        }
    }
    let properties = tool
        .input_schema
        .get("properties")
        .and_then(Value::as_object);
    let mut narrowed_any = false;
    for (param, schema) in properties.into_iter().flatten() {
        let subject = format!("{name}.{param}");
        let narrowed = is_narrowed(schema);
        narrowed_any |= narrowed;
        match schema.get("description").and_then(Value::as_str) {
            None => find(&subject, "the parameter has no description".into()),
            Some(text) if states_limit(text) && !narrowed => find(
                &subject,
                "its description states a limit that its schema does not enforce (add a @schema \
                 tag)"
                    .into(),
            ),
            Some(_) => {}
        }
    }
    if states_limit(&tool.description) && !narrowed_any && properties.is_some_and(|p| !p.is_empty())
    {
        find(
            name,
            "the description states a limit that no parameter's schema enforces (add a @schema \
             tag)"
                .into(),
        );
    }
}

/// The tool's description and each parameter's, with the parameter's name.
fn texts(tool: &Tool) -> Vec<(String, Option<String>)> {
    let mut texts = vec![(tool.description.clone(), None)];
    if let Some(properties) = tool
        .input_schema
        .get("properties")
        .and_then(Value::as_object)
    {
        for (param, schema) in properties {
            if let Some(text) = schema.get("description").and_then(Value::as_str) {
                texts.push((text.to_string(), Some(param.clone())));
            }
        }
    }
    texts
}

/// The lower-case words of `text`.
fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric() && c != '-')
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
}

/// A sibling's one-word WIT name used as a reference ("see add"), which no rewrite can tell from
/// the English word.
fn sibling_in_wit_form(plugin: &Plugin, text: &str) -> Option<String> {
    let words: Vec<&str> = text
        .split(|c: char| c.is_whitespace() || ",.;:()".contains(c))
        .filter(|w| !w.is_empty())
        .collect();
    words.windows(2).find_map(|pair| {
        let referring = REFERRING_WORDS.contains(&pair[0].to_lowercase().as_str());
        (referring && plugin.references.is_tool(pair[1])).then(|| pair[1].to_string())
    })
}

/// Whether prose states a numeric limit: a number after a limit word ("at most 100", "up to
/// 16"), or a range ("1 to 16", "0-100").
fn states_limit(text: &str) -> bool {
    let words: Vec<String> = words(text).collect();
    let is_number = |w: &str| w.chars().next().is_some_and(|c| c.is_ascii_digit());
    // `0-100`, not a date (`2024-03-10`) or a version.
    let digits = |w: &str| !w.is_empty() && w.bytes().all(|b| b.is_ascii_digit());
    let is_range = |w: &str| {
        w.split_once('-')
            .is_some_and(|(a, b)| digits(a) && digits(b))
    };
    words.iter().enumerate().any(|(i, word)| {
        let after_limit = is_number(word)
            && words[i.saturating_sub(3)..i]
                .iter()
                .any(|w| LIMIT_WORDS.contains(&w.as_str()));
        let range = is_number(word)
            && words.get(i + 1).is_some_and(|w| w == "to")
            && words.get(i + 2).is_some_and(|w| is_number(w));
        after_limit || range || is_range(word)
    })
}

/// Whether a parameter's schema says more than its WIT type does: a length, a pattern, a format,
/// or a range other than an integer type's own.
fn is_narrowed(schema: &Value) -> bool {
    let Some(object) = schema.as_object() else {
        return false;
    };
    let inner = object
        .get("anyOf")
        .and_then(|any| any.get(0))
        .and_then(Value::as_object)
        .unwrap_or(object);
    // Any `@schema` keyword but a range (which every integer type has), a default or examples.
    let narrowing = KEYWORDS
        .iter()
        .filter(|k| !matches!(**k, "minimum" | "maximum" | "default" | "examples"));
    if narrowing.into_iter().any(|k| inner.contains_key(*k)) {
        return true;
    }
    let whole_range = |key: &str| {
        inner.get(key).is_none_or(|bound| {
            const TYPE_BOUNDS: [i128; 12] = [
                0,
                u8::MAX as i128,
                u16::MAX as i128,
                u32::MAX as i128,
                u64::MAX as i128,
                i8::MIN as i128,
                i8::MAX as i128,
                i16::MIN as i128,
                i16::MAX as i128,
                i32::MIN as i128,
                i32::MAX as i128,
                i64::MIN as i128,
            ];
            let exact = bound
                .as_i64()
                .map(i128::from)
                .or_else(|| bound.as_u64().map(i128::from));
            match exact {
                Some(n) => TYPE_BOUNDS.contains(&n) || n == i64::MAX as i128,
                None => bound
                    .as_f64()
                    .is_some_and(|f| f.abs() == f64::from(f32::MAX)),
            }
        })
    };
    !(whole_range("minimum") && whole_range("maximum"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn limits_in_prose_are_seen() {
        for text in [
            "at most 1000000 bytes",
            "1 to 16 days",
            "up to 50 results",
            "between 0 and 100",
            "a percentage, 0-100",
        ] {
            assert!(states_limit(text), "{text}");
        }
        for text in [
            "the 3 largest files",
            "a path",
            "utf-8 text",
            "RFC 3339 time",
            "as 2024-03-10T12:00Z",
        ] {
            assert!(!states_limit(text), "{text}");
        }
    }

    #[test]
    fn a_schema_is_narrowed_only_beyond_its_type() {
        assert!(!is_narrowed(
            &json!({"type": "integer", "minimum": 0, "maximum": 255})
        ));
        assert!(!is_narrowed(
            &json!({"anyOf": [{"type": "integer", "minimum": 0, "maximum": 4294967295_u64}, {"type": "null"}]})
        ));
        assert!(is_narrowed(
            &json!({"type": "integer", "minimum": 1, "maximum": 16})
        ));
        assert!(is_narrowed(
            &json!({"anyOf": [{"type": "string", "maxLength": 9}, {"type": "null"}]})
        ));
        assert!(!is_narrowed(&json!({"type": "string"})));
    }
}
