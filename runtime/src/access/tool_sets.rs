//! Who may see and call which tools: rules from a principal's identity to plugins and tools.
//!
//! A rule matches a principal when every condition it gives holds (a rule that gives none
//! matches everyone). With no rules at all every principal has every tool; once there is one, a
//! tool is a principal's only if some rule matching it allows the tool and none denies it. The
//! enterprise policy's denials come on top, and no rule can lift them.

use crate::access::Principal;
use crate::access::glob;

/// What a rule's `allow` or `deny` names: tools by their MCP name (`notes_*`), or whole plugins
/// (`plugin:notes`), each a glob.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pattern {
    Tool(String),
    Plugin(String),
}

impl Pattern {
    pub fn parse(text: &str) -> Self {
        match text.strip_prefix("plugin:") {
            Some(plugin) => Pattern::Plugin(plugin.to_string()),
            None => Pattern::Tool(text.to_string()),
        }
    }

    pub fn covers(&self, plugin: &str, tool: &str) -> bool {
        match self {
            Pattern::Tool(pattern) => glob::matches(pattern, tool),
            Pattern::Plugin(pattern) => glob::matches(pattern, plugin),
        }
    }
}

/// The conditions a rule puts on a principal; each given one must hold, each a glob.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Who {
    /// The principal's name (`key:ci`, `local`, `stdio`, a token's `sub`, or `sub:SUB` for a
    /// `sub` that has a `:` or is one of those names).
    pub principal: Option<String>,
    /// The API key's name.
    pub key: Option<String>,
    pub subject: Option<String>,
    pub client_id: Option<String>,
    /// A scope the token carries.
    pub scope: Option<String>,
    /// A group the token names.
    pub group: Option<String>,
}

impl Who {
    fn matches(&self, principal: &Principal) -> bool {
        let one = |pattern: &Option<String>, value: Option<&str>| match pattern {
            None => true,
            Some(pattern) => value.is_some_and(|value| glob::matches(pattern, value)),
        };
        let any = |pattern: &Option<String>, values: &[String]| match pattern {
            None => true,
            Some(pattern) => values.iter().any(|value| glob::matches(pattern, value)),
        };
        one(&self.principal, Some(&principal.name))
            && one(&self.key, principal.key.as_deref())
            && one(&self.subject, principal.subject.as_deref())
            && one(&self.client_id, principal.client_id.as_deref())
            && any(&self.scope, &principal.scopes)
            && any(&self.group, &principal.groups)
    }
}

/// One `[[access]]` rule.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rule {
    pub who: Who,
    pub allow: Vec<Pattern>,
    pub deny: Vec<Pattern>,
}

/// Every rule, and the policy's denials.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ToolSets {
    pub rules: Vec<Rule>,
    /// Denied to every principal, whatever the rules say (the enterprise policy's cap).
    pub denied: Vec<Pattern>,
}

impl ToolSets {
    /// Whether `principal` may see and call `tool`, a tool of `plugin`.
    pub fn allows(&self, principal: &Principal, plugin: &str, tool: &str) -> bool {
        if self.denied.iter().any(|p| p.covers(plugin, tool)) {
            return false;
        }
        if self.rules.is_empty() {
            return true;
        }
        let mut allowed = false;
        for rule in self.rules.iter().filter(|r| r.who.matches(principal)) {
            if rule.deny.iter().any(|p| p.covers(plugin, tool)) {
                return false;
            }
            allowed |= rule.allow.iter().any(|p| p.covers(plugin, tool));
        }
        allowed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(who: Who, allow: &[&str], deny: &[&str]) -> Rule {
        Rule {
            who,
            allow: allow.iter().map(|p| Pattern::parse(p)).collect(),
            deny: deny.iter().map(|p| Pattern::parse(p)).collect(),
        }
    }

    fn oauth(subject: &str, scopes: &[&str], groups: &[&str]) -> Principal {
        Principal {
            subject: Some(subject.into()),
            scopes: scopes.iter().map(|s| s.to_string()).collect(),
            groups: groups.iter().map(|s| s.to_string()).collect(),
            ..Principal::api_key("unused")
        }
    }

    #[test]
    fn no_rules_allow_everything_but_the_policy_cap() {
        let mut sets = ToolSets::default();
        assert!(sets.allows(&Principal::local(), "notes", "notes_delete"));
        sets.denied.push(Pattern::parse("*_delete"));
        assert!(!sets.allows(&Principal::local(), "notes", "notes_delete"));
        assert!(sets.allows(&Principal::local(), "notes", "notes_search"));
    }

    #[test]
    fn a_tool_needs_a_matching_allow_and_no_matching_deny() {
        let sets = ToolSets {
            rules: vec![
                rule(
                    Who {
                        group: Some("eng".into()),
                        ..Who::default()
                    },
                    &["plugin:notes", "echo_*"],
                    &["notes_delete"],
                ),
                rule(
                    Who {
                        key: Some("ci".into()),
                        ..Who::default()
                    },
                    &["echo_repeat"],
                    &[],
                ),
                rule(
                    Who {
                        scope: Some("admin".into()),
                        ..Who::default()
                    },
                    &["*"],
                    &[],
                ),
            ],
            denied: vec![],
        };
        let alice = oauth("alice", &["tools"], &["eng"]);
        assert!(sets.allows(&alice, "notes", "notes_search"));
        assert!(sets.allows(&alice, "echo", "echo_repeat"));
        assert!(!sets.allows(&alice, "notes", "notes_delete"));
        assert!(!sets.allows(&alice, "shapes", "shapes_area"));
        let ci = Principal::api_key("ci");
        assert!(sets.allows(&ci, "echo", "echo_repeat"));
        assert!(!sets.allows(&ci, "echo", "echo_shout"));
        // An admin in eng is still denied what the eng rule denies.
        let admin = oauth("root", &["admin"], &["eng"]);
        assert!(sets.allows(&admin, "shapes", "shapes_area"));
        assert!(!sets.allows(&admin, "notes", "notes_delete"));
        assert!(!sets.allows(&Principal::local(), "echo", "echo_repeat"));
    }

    #[test]
    fn a_token_whose_sub_names_an_api_key_gets_no_rule_of_that_key() {
        let token = |sub: &str| {
            let values = serde_json::json!({"sub": sub, "groups": "Finance Admins"});
            crate::access::oauth::claims::Claims {
                via: crate::access::Via::Jwt,
                values: values.as_object().unwrap().clone(),
            }
            .principal()
            .unwrap()
        };
        let only = |who: Who| ToolSets {
            rules: vec![rule(who, &["*"], &[])],
            denied: vec![],
        };
        let by_principal = |name: &str| {
            only(Who {
                principal: Some(name.into()),
                ..Who::default()
            })
        };
        let ci_key = only(Who {
            key: Some("ci".into()),
            ..Who::default()
        });
        for sets in [&ci_key, &by_principal("key:ci"), &by_principal("key:*")] {
            assert!(sets.allows(&Principal::api_key("ci"), "echo", "echo_echo"));
            assert!(!sets.allows(&token("key:ci"), "echo", "echo_echo"));
        }
        assert!(by_principal("local").allows(&Principal::local(), "echo", "echo_echo"));
        assert!(!by_principal("local").allows(&token("local"), "echo", "echo_echo"));
        // Each kind can still be named: the token by its escaped name or by its subject.
        assert!(by_principal("sub:key:ci").allows(&token("key:ci"), "echo", "echo_echo"));
        let by_subject = only(Who {
            subject: Some("key:ci".into()),
            ..Who::default()
        });
        assert!(by_subject.allows(&token("key:ci"), "echo", "echo_echo"));
        assert!(!by_subject.allows(&Principal::api_key("ci"), "echo", "echo_echo"));
        // One string is one group.
        let group = |name: &str| {
            only(Who {
                group: Some(name.into()),
                ..Who::default()
            })
        };
        assert!(!group("Admins").allows(&token("alice"), "echo", "echo_echo"));
        assert!(group("Finance Admins").allows(&token("alice"), "echo", "echo_echo"));
    }
}
