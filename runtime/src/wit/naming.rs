//! The MCP names of a plugin's tools: `{plugin}_{function}` by default (see
//! [`crate::wit::naming::tool_name`]), then the operator's `[plugins.NAME.tools]` table, which renames
//! or hides a tool by its default name.
//!
//! Default names are not injective across plugins (`x` exporting `read-file` and `x_read`
//! exporting `file` are both `x_read_file`), so the registry refuses a plugin whose tool takes a
//! name already served; the table is how an operator settles that without editing a plugin.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Result, bail};

/// The longest tool name many MCP hosts accept.
pub const MAX_TOOL_NAME: usize = 64;

/// What the operator says of one tool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolRule {
    /// Offer it under this name instead.
    Rename(String),
    /// Neither list it nor let it be called.
    Hide,
}

/// A plugin's rules, keyed by the tools' default MCP names.
pub type ToolRules = BTreeMap<String, ToolRule>;

/// Checks that `name` suits every MCP host: 1 to [`MAX_TOOL_NAME`] ASCII letters, digits, `_`
/// and `-`.
pub fn check_tool_name(name: &str) -> Result<()> {
    let valid_chars = name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if name.is_empty() || name.len() > MAX_TOOL_NAME || !valid_chars {
        bail!(
            "tool name \"{name}\" must be 1 to {MAX_TOOL_NAME} ASCII letters, digits, `_` or `-`"
        );
    }
    Ok(())
}

/// The name each tool is offered under (`None`: hidden), in the order of `defaults`. A rule for
/// a tool the plugin does not have, or two tools left with one name, is an error naming the
/// plugin's real tools.
pub fn apply(plugin: &str, rules: &ToolRules, defaults: &[String]) -> Result<Vec<Option<String>>> {
    let known: BTreeSet<&str> = defaults.iter().map(String::as_str).collect();
    if let Some(unknown) = rules.keys().find(|key| !known.contains(key.as_str())) {
        let real: Vec<&str> = known.into_iter().collect();
        bail!(
            "plugin \"{plugin}\" has no tool `{unknown}` to rename or hide; its tools are: {}",
            real.join(", ")
        );
    }
    let names: Vec<Option<String>> = defaults
        .iter()
        .map(|default| match rules.get(default) {
            None => Some(default.clone()),
            Some(ToolRule::Rename(name)) => Some(name.clone()),
            Some(ToolRule::Hide) => None,
        })
        .collect();
    let mut seen = BTreeMap::new();
    for (default, name) in defaults.iter().zip(&names) {
        let Some(name) = name else { continue };
        if let Some(first) = seen.insert(name.as_str(), default.as_str()) {
            bail!(
                "plugin \"{plugin}\" would offer two tools named `{name}` (`{first}` and \
                 `{default}` by default); rename or hide one in [plugins.{plugin}.tools]"
            );
        }
    }
    Ok(names)
}

/// The MCP name of a tool: `{plugin}_{function}`, or `{plugin}_{interface}_{function}` when two of
/// the plugin's exported functions share a name. Kebab-case becomes snake_case, and any character
/// outside `[A-Za-z0-9_-]` becomes `_`, so names suit every MCP host.
pub fn tool_name(plugin: &str, interface: Option<&str>, function: &str) -> String {
    let interface = interface.map(interface_name);
    [Some(plugin), interface, Some(function)]
        .into_iter()
        .flatten()
        .map(sanitize)
        .collect::<Vec<_>>()
        .join("_")
}

/// The last name of an exported interface: `ns:pkg/name@1.0.0` and `name` are both `name`.
pub fn interface_name(export: &str) -> &str {
    let name = export.rsplit('/').next().unwrap_or(export);
    name.split('@').next().unwrap_or(name)
}

/// The JSON name of a WIT identifier (a parameter, field, enum case, variant case or flag):
/// lowerCamelCase, as MCP's own messages and the reference servers spell names (`old-text` →
/// `oldText`), and borrowed when there is nothing to change. WIT's words are all lower or all
/// upper case, so two identifiers of one type can meet only through upper-case words (`a-b` and
/// `A-B` differ, `AB` and `A-B` do not): [`crate::wit::schema`] refuses a type where they meet.
pub fn json_name(wit: &str) -> Cow<'_, str> {
    if wit.contains('-') {
        Cow::Owned(camel_case(wit))
    } else {
        Cow::Borrowed(wit)
    }
}

/// A WIT name in lowerCamelCase (`resource-uri` → `resourceUri`): the JSON name of every WIT
/// identifier (see [`json_name`]), and what prompt arguments and URI template variables are
/// named, since RFC 6570 variables cannot hold `-`.
pub fn camel_case(kebab: &str) -> String {
    let mut out = String::with_capacity(kebab.len());
    for (i, word) in kebab.split('-').enumerate() {
        let mut chars = word.chars();
        match chars.next() {
            Some(first) if i > 0 => {
                out.push(first.to_ascii_uppercase());
                out.extend(chars);
            }
            _ => out.push_str(word),
        }
    }
    out
}

/// The URI scheme of a plugin's resources: its name, with `_` as `-` (a scheme cannot hold
/// `_`), in lower case; `None` when the name cannot be a scheme (it starts with a digit).
pub fn resource_scheme(plugin: &str) -> Option<String> {
    let scheme = plugin.replace('_', "-").to_ascii_lowercase();
    scheme
        .starts_with(|c: char| c.is_ascii_alphabetic())
        .then_some(scheme)
}

/// A plugin or tool name part: `-` becomes `_`, anything outside `[A-Za-z0-9_]` becomes `_`.
pub fn sanitize(part: &str) -> String {
    part.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaults() -> Vec<String> {
        vec!["x_read_file".into(), "x_write_file".into()]
    }

    #[test]
    fn prompt_and_resource_names() {
        assert_eq!(camel_case("resource-uri"), "resourceUri");
        assert_eq!(camel_case("id"), "id");
        assert_eq!(camel_case("a-b-c"), "aBC");
        assert_eq!(json_name("old-text"), "oldText");
        assert_eq!(json_name("max-length2"), "maxLength2");
        assert_eq!(json_name("HTTP-version"), "HTTPVersion");
        assert!(matches!(json_name("path"), Cow::Borrowed("path")));
        assert_eq!(resource_scheme("My_Notes").as_deref(), Some("my-notes"));
        assert_eq!(resource_scheme("9lives"), None);
        assert_eq!(interface_name("moat:notes/prompts@0.1.0"), "prompts");
    }

    #[test]
    fn rules_rename_and_hide_by_default_name() {
        let rules = ToolRules::from([
            ("x_read_file".into(), ToolRule::Rename("x_fetch".into())),
            ("x_write_file".into(), ToolRule::Hide),
        ]);
        assert_eq!(
            apply("x", &rules, &defaults()).unwrap(),
            [Some("x_fetch".to_string()), None]
        );
        assert_eq!(
            apply("x", &ToolRules::new(), &defaults()).unwrap(),
            [
                Some("x_read_file".to_string()),
                Some("x_write_file".to_string())
            ]
        );
    }

    #[test]
    fn a_rule_for_no_tool_names_the_real_ones() {
        let rules = ToolRules::from([("read-file".into(), ToolRule::Hide)]);
        let error = apply("x", &rules, &defaults()).unwrap_err().to_string();
        assert!(
            error.contains("no tool `read-file`") && error.contains("x_read_file, x_write_file"),
            "{error}"
        );
    }

    #[test]
    fn a_rename_onto_a_sibling_is_an_error() {
        let rules = ToolRules::from([(
            "x_read_file".into(),
            ToolRule::Rename("x_write_file".into()),
        )]);
        let error = apply("x", &rules, &defaults()).unwrap_err().to_string();
        assert!(error.contains("two tools named `x_write_file`"), "{error}");
    }

    #[test]
    fn tool_names_are_checked() {
        for good in ["x_fetch", "a-b_C9", &"n".repeat(MAX_TOOL_NAME)] {
            check_tool_name(good).unwrap();
        }
        for bad in [
            "",
            "x.fetch",
            "x fetch",
            "é",
            &"n".repeat(MAX_TOOL_NAME + 1),
        ] {
            assert!(check_tool_name(bad).is_err(), "{bad:?}");
        }
    }
}
