//! Policies in Cedar over a real registry: typed by each tool's WIT at load (a misspelt argument
//! or a wrong type is refused with Cedar's message and where it is), decided per call with the
//! arguments, per list with the arguments unknown, and per outgoing request; the enterprise's
//! `forbid`s beat moat.toml's `permit`s; `[[access]]` explained as Cedar decides as it does.

use std::collections::HashMap;
use std::path::PathBuf;

use moat::access::Principal;
use moat::access::tool_sets::{Pattern, Rule, ToolSets, Who};
use moat::plugin::registry::Registry;
use moat::policy::{Author, Facts, Outgoing, Policies, PolicyFile, Settings, Verdict};
use moat_tests::{TempDir, engine, plugins, source};
use serde_json::{Map, Value, json};

fn registry() -> Registry {
    let sources = [
        source("fetch", plugins::FETCH),
        source("notes", plugins::NOTES),
        source("shapes", plugins::SHAPES),
        source("echo", plugins::ECHO),
    ];
    let (registry, errors) = Registry::load(engine(), &sources).unwrap();
    assert!(errors.is_empty(), "{errors:?}");
    registry
}

/// The policies of `files` (enterprise's first), written to a fresh folder.
fn load(registry: &Registry, files: &[(&str, Author, &str)]) -> anyhow::Result<Policies> {
    let dir = TempDir::new("cedar");
    let files = files
        .iter()
        .map(|(name, author, text)| {
            let path: PathBuf = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            PolicyFile {
                path,
                author: *author,
            }
        })
        .collect();
    let settings = Settings {
        files,
        claims: [("department".to_string(), moat::policy::ClaimType::String)].into(),
    };
    Policies::load(&settings, registry, &HashMap::new())
}

fn team(registry: &Registry, text: &str) -> Policies {
    load(registry, &[("team.cedar", Author::Operator, text)]).unwrap()
}

fn person(name: &str, groups: &[&str]) -> Principal {
    let mut principal = Principal::anonymous();
    principal.name = name.into();
    principal.via = moat::access::Via::Jwt;
    principal.groups = groups.iter().map(|g| g.to_string()).collect();
    principal
}

fn args(value: Value) -> Map<String, Value> {
    value.as_object().unwrap().clone()
}

fn allowed(verdict: &Verdict) -> bool {
    matches!(verdict, Verdict::Allowed { .. })
}

const INTRANET: &str = r#"
@id("engineers-fetch")
permit (principal in Moat::Group::"engineers", action == Moat::Action::"call_tool:fetch_fetch", resource);

@id("contractors-intranet-only")
@reason("contractors may fetch only intranet URLs")
permit (principal in Moat::Group::"contractors", action == Moat::Action::"call_tool:fetch_fetch", resource)
when { context.arguments.url like "https://intranet.example/*" };

@id("no-destructive-for-contractors")
forbid (principal in Moat::Group::"contractors", action in Moat::Action::"call_tool", resource)
when { resource.annotations.destructive };

@id("everyone-notes")
permit (principal, action in Moat::Action::"call_tool", resource in Moat::Plugin::"notes");
"#;

#[test]
fn a_call_is_decided_on_its_arguments_its_annotations_and_its_callers_groups() {
    let registry = registry();
    let policies = team(&registry, INTRANET);
    let facts = Facts::default();
    let (alice, bob) = (
        person("alice", &["engineers"]),
        person("bob", &["contractors"]),
    );
    let outside = args(json!({"url": "https://evil.example/x"}));
    let inside = args(json!({"url": "https://intranet.example/wiki"}));

    let verdict = policies.call_tool(&alice, "fetch_fetch", Some(&outside), &facts);
    assert_eq!(
        verdict,
        Verdict::Allowed {
            by: vec!["engineers-fetch".into()]
        }
    );
    let verdict = policies.call_tool(&bob, "fetch_fetch", Some(&inside), &facts);
    assert_eq!(
        verdict,
        Verdict::Allowed {
            by: vec!["contractors-intranet-only".into()]
        }
    );
    let verdict = policies.call_tool(&bob, "fetch_fetch", Some(&outside), &facts);
    assert_eq!(
        verdict,
        Verdict::Denied {
            by: vec![],
            message:
                "denied: no policy permits bob to call tool `fetch_fetch` with these arguments"
                    .into()
        }
    );

    // write_note is not annotated read-only, so MCP takes it as destructive: the forbid
    // beats the permit of every notes tool, for contractors only.
    let note = args(json!({"name": "a", "text": "b"}));
    let verdict = policies.call_tool(&bob, "notes_write_note", Some(&note), &facts);
    assert_eq!(
        verdict,
        Verdict::Denied {
            by: vec!["no-destructive-for-contractors".into()],
            message: "denied by policy `no-destructive-for-contractors`".into()
        }
    );
    assert!(allowed(&policies.call_tool(
        &alice,
        "notes_write_note",
        Some(&note),
        &facts
    )));
    // Nobody is permitted what no policy names.
    assert!(!allowed(&policies.call_tool(
        &alice,
        "echo_echo",
        Some(&args(json!({"message": "x"}))),
        &facts
    )));
}

#[test]
fn arguments_of_the_wrong_type_are_refused_before_any_policy() {
    let registry = registry();
    let policies = team(&registry, INTRANET);
    let verdict = policies.call_tool(
        &person("alice", &["engineers"]),
        "fetch_fetch",
        Some(&args(json!({"url": 7}))),
        &Facts::default(),
    );
    assert_eq!(
        verdict,
        Verdict::Invalid("arguments.url is not a string".into())
    );
}

#[test]
fn a_policy_naming_an_argument_the_tool_lacks_or_comparing_it_wrongly_is_refused_at_load() {
    let registry = registry();
    let typo = r#"@id("typo")
permit (principal, action == Moat::Action::"call_tool:fetch_fetch", resource)
when { context.arguments.ulr like "https://*" };"#;
    let error = format!(
        "{:#}",
        load(&registry, &[("team.cedar", Author::Operator, typo)])
            .err()
            .unwrap()
    );
    assert!(error.contains("team.cedar:3:8:"), "{error}");
    assert!(error.contains("`arguments.ulr`"), "{error}");
    assert!(error.contains("did you mean `url`?"), "{error}");
    assert!(
        error.contains("\n  when { context.arguments.ulr like \"https://*\" };\n         ^"),
        "{error}"
    );

    let wrong_type = r#"permit (principal, action == Moat::Action::"call_tool:shapes_check", resource)
when { context.arguments.value like "x" };"#;
    let error = format!(
        "{:#}",
        load(&registry, &[("t.cedar", Author::Operator, wrong_type)])
            .err()
            .unwrap()
    );
    assert!(error.contains("t.cedar:2:8:"), "{error}");
    assert!(error.contains("expected String but saw Long"), "{error}");

    let unparsable = "permit (principal, action, resource) when { context.x == };";
    let error = format!(
        "{:#}",
        load(&registry, &[("t.cedar", Author::Operator, unparsable)])
            .err()
            .unwrap()
    );
    assert!(error.contains("t.cedar:1:58: unexpected token"), "{error}");

    let template = "permit (principal == ?principal, action, resource);";
    let error = format!(
        "{:#}",
        load(&registry, &[("t.cedar", Author::Operator, template)])
            .err()
            .unwrap()
    );
    assert!(error.contains("a template"), "{error}");

    let twice = "@id(\"same\") permit (principal, action, resource);";
    let error = load(
        &registry,
        &[
            ("a.cedar", Author::Enterprise, twice),
            ("b.cedar", Author::Operator, twice),
        ],
    )
    .err()
    .unwrap();
    assert!(
        format!("{error:#}").contains("policy `same` is also in"),
        "{error:#}"
    );
}

#[test]
fn the_enterprises_forbid_beats_moat_tomls_permit() {
    let registry = registry();
    let enterprise = r#"@id("no-fetch-outside")
@reason("the enterprise forbids fetching outside the intranet")
forbid (principal, action == Moat::Action::"call_tool:fetch_fetch", resource)
unless { context.arguments.url like "https://intranet.example/*" };"#;
    let operator = r#"@id("fetch-anything") permit (principal, action, resource);"#;
    let policies = load(
        &registry,
        &[
            ("enterprise.cedar", Author::Enterprise, enterprise),
            ("team.cedar", Author::Operator, operator),
        ],
    )
    .unwrap();
    let alice = person("alice", &["engineers"]);
    let verdict = policies.call_tool(
        &alice,
        "fetch_fetch",
        Some(&args(json!({"url": "https://evil.example"}))),
        &Facts::default(),
    );
    assert_eq!(
        verdict,
        Verdict::Denied {
            by: vec!["no-fetch-outside".into()],
            message: "denied by policy `no-fetch-outside`: the enterprise forbids fetching outside the intranet".into()
        }
    );
}

#[test]
fn a_list_shows_what_some_arguments_could_be_allowed() {
    let registry = registry();
    let policies = team(&registry, INTRANET);
    let facts = Facts::default();
    let (alice, bob, carol) = (
        person("alice", &["engineers"]),
        person("bob", &["contractors"]),
        person("carol", &[]),
    );
    // Permitted for some URLs only: listed.
    assert!(policies.lists_tool(&bob, "fetch_fetch", &facts));
    assert!(policies.lists_tool(&alice, "fetch_fetch", &facts));
    // Permitted for nobody in carol's place, forbidden to bob whatever the arguments.
    assert!(!policies.lists_tool(&carol, "fetch_fetch", &facts));
    // The notes tools carry no annotation, so MCP takes them as destructive.
    assert!(!policies.lists_tool(&bob, "notes_write_note", &facts));
    assert!(!policies.lists_tool(&bob, "notes_read_note", &facts));
    assert!(policies.lists_tool(&carol, "notes_read_note", &facts));
    assert!(!policies.lists_tool(&alice, "echo_echo", &facts));
}

#[test]
fn claims_declared_for_policies_are_read_from_the_token() {
    let registry = registry();
    let policies = team(
        &registry,
        r#"permit (principal, action in Moat::Action::"call_tool", resource)
when { principal.claims has department && principal.claims.department == "research" };"#,
    );
    let mut dana = person("dana", &[]);
    let note = args(json!({"name": "n"}));
    assert!(!allowed(&policies.call_tool(
        &dana,
        "notes_read_note",
        Some(&note),
        &Facts::default()
    )));
    dana.claims = args(json!({"department": "research", "other": 1.5}));
    assert!(allowed(&policies.call_tool(
        &dana,
        "notes_read_note",
        Some(&note),
        &Facts::default()
    )));
    // A claim of another type than declared is not given to the policies.
    dana.claims = args(json!({"department": 3}));
    assert!(!allowed(&policies.call_tool(
        &dana,
        "notes_read_note",
        Some(&note),
        &Facts::default()
    )));
}

#[test]
fn a_request_of_a_running_call_is_decided_for_its_caller() {
    let registry = registry();
    let policies = team(
        &registry,
        r#"@id("engineers-reach-the-intranet")
permit (principal in Moat::Group::"engineers", action == Moat::Action::"reach", resource in Moat::Plugin::"fetch")
when { resource.host like "*.intranet.example" };

@id("contractors-reach-the-wiki")
permit (principal in Moat::Group::"contractors", action == Moat::Action::"reach", resource in Moat::Plugin::"fetch")
when { resource.host == "wiki.intranet.example" && resource.scheme == "https" && context.method == "GET" };"#,
    );
    let request = |host| Outgoing {
        scheme: "https",
        host,
        port: 443,
        method: "GET",
        path: "/",
    };
    let facts = Facts::default();
    let (alice, bob) = (
        person("alice", &["engineers"]),
        person("bob", &["contractors"]),
    );
    let reach = |who: &Principal, plugin: &str, host| {
        allowed(&policies.reach(who, plugin, "fetch_fetch", &request(host), &facts))
    };
    assert!(reach(&alice, "fetch", "git.intranet.example"));
    assert!(reach(&bob, "fetch", "wiki.intranet.example"));
    assert!(!reach(&bob, "fetch", "git.intranet.example"));
    // Another plugin's requests are not the fetch plugin's.
    assert!(!reach(&alice, "notes", "git.intranet.example"));
    // The sandbox asks through the call's binding, with the same answer.
    let bound = policies
        .reach_of(&bob, "fetch", "fetch_fetch", &facts)
        .unwrap();
    let refused = bound.allows(&request("git.intranet.example")).unwrap_err();
    assert_eq!(
        refused,
        "denied: no policy permits bob to reach https://git.intranet.example:443 from tool `fetch_fetch`"
    );
    // Without policies, nothing is bound: the grants alone decide.
    assert!(
        Policies::none()
            .reach_of(&bob, "fetch", "fetch_fetch", &facts)
            .is_none()
    );
}

/// `[[access]]` rules, decided by moat's rule engine and by the Cedar `moat policy explain`
/// prints for them, agree for every principal and tool here.
#[test]
fn access_rules_decide_as_the_cedar_explain_prints() {
    let registry = registry();
    let who = |group: Option<&str>, key: Option<&str>| Who {
        group: group.map(str::to_string),
        key: key.map(str::to_string),
        ..Who::default()
    };
    let sets = ToolSets {
        rules: vec![
            Rule {
                who: who(Some("engineers"), None),
                allow: vec![Pattern::parse("plugin:notes"), Pattern::parse("fetch_*")],
                deny: vec![Pattern::parse("notes_write_note")],
            },
            Rule {
                who: who(None, Some("ci-*")),
                allow: vec![Pattern::parse("*_echo"), Pattern::parse("shapes_*")],
                deny: vec![],
            },
        ],
        denied: vec![Pattern::parse("shapes_echo_bytes")],
    };
    let text = moat::policy::explain::tool_sets(&sets);
    let policies = team(&registry, &text);
    let mut ci = Principal::api_key("ci-nightly");
    ci.via = moat::access::Via::ApiKey;
    let principals = [
        person("alice", &["engineers"]),
        person("bob", &["contractors"]),
        ci,
        Principal::api_key("other"),
    ];
    let mut compared = 0;
    for principal in &principals {
        for (plugin, tool) in registry.tools() {
            let by_rules = sets.allows(principal, &plugin.name, &tool.name);
            let by_cedar = policies.lists_tool(principal, &tool.name, &Facts::default());
            assert_eq!(
                by_rules, by_cedar,
                "{} calling {}:\n{text}",
                principal.name, tool.name
            );
            compared += 1;
        }
    }
    assert!(compared > 40);
}
