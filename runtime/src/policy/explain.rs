//! The `[[access]]` rules and the enterprise policy's `deny_tools` as the Cedar they amount to:
//! each rule's `allow` a `permit` and its `deny` a `forbid`, for the principals it matches, over
//! tools, prompts and resources by name (`moat policy explain` prints it).
//!
//! The rules themselves are decided as they always were; this is their explanation. A glob
//! Cedar cannot say (a `?`, or a `*` over a set such as a token's groups or scopes) is printed
//! as a comment that says so.

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

fn statement(effect: &str, who: &[String], patterns: &[Pattern], id: &str) -> String {
    let names: Vec<String> = patterns.iter().map(pattern).collect();
    let mut conditions = who.to_vec();
    conditions.push(match names.as_slice() {
        [one] => one.clone(),
        many => format!("({})", many.join(" || ")),
    });
    format!(
        "@id({})\n{effect} (principal, {ACTIONS}, resource)\nwhen {{ {} }};\n",
        literal(id),
        conditions.join(" && ")
    )
}

fn pattern(pattern: &Pattern) -> String {
    match pattern {
        Pattern::Tool(glob) => format!("resource.name like {}", like(glob)),
        Pattern::Plugin(glob) => format!("resource.plugin like {}", like(glob)),
    }
}

/// The conditions on the principal, and what Cedar cannot say of them.
fn who(who: &Who) -> (Vec<String>, Vec<String>) {
    let mut said = Vec::new();
    let mut unsaid = Vec::new();
    if let Some(name) = &who.principal {
        said.push(format!("principal.name like {}", like(name)));
    }
    for (attribute, glob) in [
        ("key", &who.key),
        ("subject", &who.subject),
        ("client_id", &who.client_id),
    ] {
        if let Some(glob) = glob {
            said.push(format!(
                "principal has {attribute} && principal.{attribute} like {}",
                like(glob)
            ));
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

/// A `like` pattern for a glob: `*` is Cedar's own wildcard; `?` has none, and matches only
/// itself here (a comment would be lost in an expression, so the glob is kept literally).
fn like(glob: &str) -> String {
    literal(glob)
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
}
