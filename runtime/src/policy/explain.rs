//! The `[[access]]` rules and the enterprise policy's `deny_tools` as the Cedar they amount to:
//! each rule's `allow` a `permit` and its `deny` a `forbid`, for the principals it matches, over
//! tools, prompts and resources by name (`moat policy explain` prints it).
//!
//! The rules themselves are decided as they always were; this is their explanation. A glob
//! Cedar cannot say (a `?`, or a `*` over a set such as a token's groups or scopes) is printed
//! as a comment that says so, and left out of the statement.

use crate::access::tool_sets::{Pattern, Rule, ToolSets, Who};

const ACTIONS: &str = r#"action in [Moat::Action::"call_tool", Moat::Action::"get_prompt", Moat::Action::"read_resource"]"#;

/// The Cedar of `sets`.
pub fn tool_sets(sets: &ToolSets) -> String {
    let mut out = String::new();
    if !sets.denied.is_empty() {
        out.push_str("// The enterprise policy's deny_tools: for every caller.\n");
        out.push_str(&statement("forbid", &[], &sets.denied, "deny_tools"));
    }
    if sets.rules.is_empty() {
        out.push_str("// No [[access]] rule: every caller may use everything.\n");
        out.push_str(&format!(
            "@id(\"access\")\npermit (principal, {ACTIONS}, resource);\n"
        ));
        return out;
    }
    for (index, rule) in sets.rules.iter().enumerate() {
        out.push_str(&rule_text(index + 1, rule));
    }
    out
}

fn rule_text(number: usize, rule: &Rule) -> String {
    let mut out = format!("// [[access]] rule {number}\n");
    let (who, unsaid) = who(&rule.who);
    for note in unsaid {
        out.push_str(&format!("// not in Cedar: {note}\n"));
    }
    if !rule.allow.is_empty() {
        out.push_str(&statement(
            "permit",
            &who,
            &rule.allow,
            &format!("access-{number}-allow"),
        ));
    }
    if !rule.deny.is_empty() {
        out.push_str(&statement(
            "forbid",
            &who,
            &rule.deny,
            &format!("access-{number}-deny"),
        ));
    }
    out
}

/// The statement for `patterns`; those Cedar cannot say are named in comments before it
/// (and with none left, only the comments remain).
fn statement(effect: &str, who: &[String], patterns: &[Pattern], id: &str) -> String {
    let mut out = String::new();
    let mut names = Vec::new();
    for pattern in patterns {
        let (attribute, glob, shown) = match pattern {
            Pattern::Tool(glob) => ("name", glob, glob.clone()),
            Pattern::Plugin(glob) => ("plugin", glob, format!("plugin:{glob}")),
        };
        match in_cedar(glob) {
            true => names.push(format!("resource.{attribute} like {}", literal(glob))),
            false => out.push_str(&format!(
                "// not in Cedar: {effect} {} ({QUESTION})\n",
                literal(&shown)
            )),
        }
    }
    if names.is_empty() {
        return out;
    }
    let mut conditions = who.to_vec();
    conditions.push(match names.as_slice() {
        [one] => one.clone(),
        many => format!("({})", many.join(" || ")),
    });
    out.push_str(&format!(
        "@id({})\n{effect} (principal, {ACTIONS}, resource)\nwhen {{ {} }};\n",
        literal(id),
        conditions.join(" && ")
    ));
    out
}

/// Why a glob with `?` is left out.
const QUESTION: &str = "a `?` glob: Cedar's `like` has only `*`";

/// Whether Cedar's `like` says what `glob` does: `*` is its own wildcard, `?` it lacks.
fn in_cedar(glob: &str) -> bool {
    !glob.contains('?')
}

/// The conditions on the principal, and what Cedar cannot say of them.
fn who(who: &Who) -> (Vec<String>, Vec<String>) {
    let mut said = Vec::new();
    let mut unsaid = Vec::new();
    for (attribute, glob) in [
        ("name", &who.principal),
        ("key", &who.key),
        ("subject", &who.subject),
        ("client_id", &who.client_id),
    ] {
        let Some(glob) = glob else { continue };
        let has = match attribute {
            "name" => String::new(),
            _ => format!("principal has {attribute} && "),
        };
        match in_cedar(glob) {
            true => said.push(format!("{has}principal.{attribute} like {}", literal(glob))),
            false => unsaid.push(format!("{attribute} = {} ({QUESTION})", literal(glob))),
        }
    }
    if let Some(scope) = &who.scope {
        match is_plain(scope) {
            true => said.push(format!("principal.scopes.contains({})", literal(scope))),
            false => unsaid.push(format!("scope = {} (a glob over a set)", literal(scope))),
        }
    }
    if let Some(group) = &who.group {
        match is_plain(group) {
            true => said.push(format!("principal in Moat::Group::{}", literal(group))),
            false => unsaid.push(format!("group = {} (a glob over a set)", literal(group))),
        }
    }
    (said, unsaid)
}

fn is_plain(glob: &str) -> bool {
    !glob.contains(['*', '?'])
}

/// A Cedar string literal.
fn literal(text: &str) -> String {
    crate::policy::shape::quoted(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rule_is_a_permit_and_a_forbid_for_its_principals() {
        let sets = ToolSets {
            rules: vec![Rule {
                who: Who {
                    group: Some("eng".into()),
                    key: Some("ci-*".into()),
                    scope: Some("tools:*".into()),
                    ..Who::default()
                },
                allow: vec![Pattern::parse("plugin:notes"), Pattern::parse("echo_*")],
                deny: vec![Pattern::parse("notes_delete")],
            }],
            denied: vec![Pattern::parse("*_drop")],
        };
        let text = tool_sets(&sets);
        assert!(text.contains(r#"forbid (principal, action in"#), "{text}");
        assert!(
            text.contains(r#"when { resource.name like "*_drop" };"#),
            "{text}"
        );
        assert!(text.contains(r#"principal has key && principal.key like "ci-*" && principal in Moat::Group::"eng" && (resource.plugin like "notes" || resource.name like "echo_*")"#), "{text}");
        assert!(
            text.contains(r#"// not in Cedar: scope = "tools:*" (a glob over a set)"#),
            "{text}"
        );
        // What it prints is Cedar.
        text.parse::<cedar_policy::PolicySet>()
            .expect("Cedar parses it");
    }

    #[test]
    fn a_question_mark_glob_is_a_comment_not_a_literal_question_mark() {
        let sets = ToolSets {
            rules: vec![Rule {
                who: Who {
                    principal: Some("user-?".into()),
                    ..Who::default()
                },
                allow: vec![Pattern::parse("echo_?"), Pattern::parse("notes_*")],
                deny: vec![Pattern::parse("plugin:n?tes")],
            }],
            denied: Vec::new(),
        };
        let text = tool_sets(&sets);
        assert!(!text.contains(r#"like "user-?""#), "{text}");
        assert!(!text.contains(r#"like "echo_?""#), "{text}");
        assert!(
            text.contains(r#"// not in Cedar: name = "user-?""#),
            "{text}"
        );
        assert!(
            text.contains(r#"// not in Cedar: permit "echo_?""#),
            "{text}"
        );
        assert!(
            text.contains(r#"when { resource.name like "notes_*" };"#),
            "{text}"
        );
        assert!(
            text.contains(r#"// not in Cedar: forbid "plugin:n?tes""#)
                && !text.contains("forbid ("),
            "a forbid with nothing Cedar can say is only its comment: {text}"
        );
        text.parse::<cedar_policy::PolicySet>()
            .expect("Cedar parses it");
    }
}
