//! moat's Cedar model: the entity types, actions and contexts policies speak of, as a Cedar
//! schema made for what is served, and the entities of one request.
//!
//! ```cedar
//! namespace Moat {
//!   entity Group;
//!   entity Principal in [Group] = { name: String, authenticated_by: String, groups: Set<String>,
//!     scopes: Set<String>, client_id?: String, subject?: String, key?: String, claims: {…} };
//!   entity Plugin = { name: String, source: String, digest: String, publisher?: String };
//!   entity Tool in [Plugin] = { name: String, plugin: String, title?: String,
//!     annotations: { read_only: Bool, destructive: Bool, idempotent: Bool, open_world: Bool } };
//!   entity Prompt in [Plugin] = { name: String, plugin: String };
//!   entity Resource in [Plugin] = { name: String, plugin: String };
//!   entity Host in [Plugin] = { scheme: String, host: String, port: Long };
//!   action call_tool;                      // every tool's action is in this group
//!   action "call_tool:fetch_get" in [call_tool] appliesTo { principal: Principal, resource: Tool,
//!     context: { arguments: { url: String }, …every action's context… } };
//!   action get_prompt;                     // likewise, each prompt's arguments are strings
//!   action read_resource appliesTo { … context: { uri: String, … } };
//!   action complete appliesTo { resource: [Prompt, Resource], context: { argument: String, value: String, … } };
//!   action reach appliesTo { resource: Host, context: { method: String, path: String, tool: String, … } };
//! }
//! ```
//!
//! Every context also has `protocol_version?: String`, `client_address?: ipaddr`, `time:
//! datetime` and `replica: String`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::IpAddr;

use anyhow::{Result, bail};
use cedar_policy::{Entity, EntityUid, RestrictedExpression};

use crate::access::Principal;
use crate::plugin::prompts::Prompt;
use crate::plugin::registry::Registry;
use crate::plugin::resources::Resource;
use crate::plugin::{Plugin, Tool};
use crate::policy::shape::{Shape, quoted};

/// The type of a token claim that policies may read as `principal.claims.NAME`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClaimType {
    String,
    Long,
    Bool,
    SetOfString,
}

impl ClaimType {
    pub fn parse(text: &str) -> Result<Self> {
        Ok(match text {
            "String" => Self::String,
            "Long" => Self::Long,
            "Bool" => Self::Bool,
            "Set<String>" => Self::SetOfString,
            other => {
                bail!("a claim's type is one of String, Long, Bool or Set<String>, not `{other}`")
            }
        })
    }

    fn shape(self) -> Shape {
        match self {
            Self::String => Shape::String,
            Self::Long => Shape::Long,
            Self::Bool => Shape::Bool,
            Self::SetOfString => Shape::Set(Box::new(Shape::String)),
        }
    }
}

/// The token claims policies may read, by name.
pub type Claims = BTreeMap<String, ClaimType>;

/// What a request is about, beyond its principal and resource.
#[derive(Clone, Debug, Default)]
pub struct Facts {
    pub protocol_version: Option<String>,
    pub client_address: Option<IpAddr>,
    /// This replica's name (`[cluster]`), or empty.
    pub replica: String,
}

/// The action of a call of `tool`.
pub fn call_action(tool: &str) -> EntityUid {
    uid("Action", &format!("call_tool:{tool}"))
}

/// The action of a get of `prompt`.
pub fn prompt_action(prompt: &str) -> EntityUid {
    uid("Action", &format!("get_prompt:{prompt}"))
}

/// One of the actions every server has: `read_resource`, `complete`, `reach`.
pub fn action(name: &str) -> EntityUid {
    uid("Action", name)
}

/// The entity of `action`, in the action group `group` (none when empty): what lets a policy
/// say `action in Moat::Action::"call_tool"`.
pub fn member_action(action: EntityUid, group: &str) -> Entity {
    let parents = match group {
        "" => HashSet::new(),
        group => HashSet::from([uid("Action", group)]),
    };
    Entity::new_no_attrs(action, parents)
}

pub fn uid(kind: &str, id: &str) -> EntityUid {
    let kind = format!("Moat::{kind}").parse().expect("a Moat type name");
    EntityUid::from_type_name_and_id(kind, cedar_policy::EntityId::new(id))
}

fn string(s: &str) -> RestrictedExpression {
    RestrictedExpression::new_string(s.to_string())
}

fn strings(values: &[String]) -> RestrictedExpression {
    RestrictedExpression::new_set(values.iter().map(|v| string(v)))
}

fn record(pairs: Vec<(&str, RestrictedExpression)>) -> RestrictedExpression {
    RestrictedExpression::new_record(pairs.into_iter().map(|(k, v)| (k.to_string(), v)))
        .expect("attribute names are distinct")
}

fn entity(
    uid: EntityUid,
    attrs: Vec<(&str, RestrictedExpression)>,
    parents: Vec<EntityUid>,
) -> Entity {
    let attrs: HashMap<String, RestrictedExpression> =
        attrs.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    Entity::new(uid, attrs, parents.into_iter().collect::<HashSet<_>>())
        .expect("attribute values are plain")
}

/// The principal's entity, in its groups; of its token's claims, those `claims` declares with
/// a value of the declared type.
pub fn principal(principal: &Principal, claims: &Claims) -> Entity {
    let mut attrs = vec![
        ("name", string(&principal.name)),
        ("authenticated_by", string(principal.via.as_str())),
        ("groups", strings(&principal.groups)),
        ("scopes", strings(&principal.scopes)),
    ];
    for (name, value) in [
        ("client_id", &principal.client_id),
        ("subject", &principal.subject),
        ("key", &principal.key),
    ] {
        if let Some(value) = value {
            attrs.push((name, string(value)));
        }
    }
    let declared: Vec<(&str, RestrictedExpression)> = claims
        .iter()
        .filter_map(|(name, kind)| {
            let value = principal.claims.get(name)?;
            let value = match (kind, value) {
                // One group is often a plain string where a list is declared.
                (ClaimType::SetOfString, serde_json::Value::String(s)) => {
                    strings(std::slice::from_ref(s))
                }
                _ => kind.shape().value(value).ok()?,
            };
            Some((name.as_str(), value))
        })
        .collect();
    attrs.push(("claims", record(declared)));
    let groups = principal.groups.iter().map(|g| uid("Group", g)).collect();
    entity(uid("Principal", &principal.name), attrs, groups)
}

/// A plugin's entity; `source` is where it was loaded from.
pub fn plugin(plugin: &Plugin, source: &str) -> Entity {
    let mut attrs = vec![
        ("name", string(&plugin.name)),
        ("source", string(source)),
        ("digest", string(&plugin.admission.digest)),
    ];
    if let Some(publisher) = &plugin.admission.publisher {
        attrs.push(("publisher", string(publisher)));
    }
    entity(uid("Plugin", &plugin.name), attrs, vec![])
}

/// A tool's entity, in its plugin, with its annotations as MCP reads them when they are absent
/// (not read-only, destructive unless read-only, not idempotent, open-world).
pub fn tool(plugin: &Plugin, tool: &Tool) -> Entity {
    let hints = tool.annotations.clone().unwrap_or_default();
    let read_only = hints.read_only_hint.unwrap_or(false);
    let annotations = record(vec![
        ("read_only", RestrictedExpression::new_bool(read_only)),
        (
            "destructive",
            RestrictedExpression::new_bool(!read_only && hints.destructive_hint.unwrap_or(true)),
        ),
        (
            "idempotent",
            RestrictedExpression::new_bool(hints.idempotent_hint.unwrap_or(read_only)),
        ),
        (
            "open_world",
            RestrictedExpression::new_bool(hints.open_world_hint.unwrap_or(true)),
        ),
    ]);
    let mut attrs = vec![
        ("name", string(&tool.name)),
        ("plugin", string(&plugin.name)),
        ("annotations", annotations),
    ];
    if let Some(title) = &tool.title {
        attrs.push(("title", string(title)));
    }
    entity(
        uid("Tool", &tool.name),
        attrs,
        vec![uid("Plugin", &plugin.name)],
    )
}

pub fn prompt(plugin: &Plugin, prompt: &Prompt) -> Entity {
    member("Prompt", &prompt.name, plugin)
}

pub fn resource(plugin: &Plugin, resource: &Resource) -> Entity {
    member("Resource", &resource.name, plugin)
}

fn member(kind: &str, name: &str, plugin: &Plugin) -> Entity {
    let attrs = vec![("name", string(name)), ("plugin", string(&plugin.name))];
    entity(uid(kind, name), attrs, vec![uid("Plugin", &plugin.name)])
}

/// Where an outgoing request of a plugin goes.
pub type Outgoing<'a> = crate::sandbox::network::Reached<'a>;

/// The host entity of `outgoing`, in the plugin that sends it.
pub fn host(plugin: &str, outgoing: &Outgoing<'_>) -> Entity {
    let id = format!("{}://{}:{}", outgoing.scheme, outgoing.host, outgoing.port);
    let attrs = vec![
        ("scheme", string(outgoing.scheme)),
        ("host", string(outgoing.host)),
        ("port", RestrictedExpression::new_long(outgoing.port.into())),
    ];
    entity(uid("Host", &id), attrs, vec![uid("Plugin", plugin)])
}

/// The context attributes every request has, as values.
pub fn common_context(facts: &Facts) -> Vec<(String, RestrictedExpression)> {
    let mut pairs = vec![
        ("time".to_string(), now()),
        ("replica".to_string(), string(&facts.replica)),
    ];
    if let Some(version) = &facts.protocol_version {
        pairs.push(("protocol_version".into(), string(version)));
    }
    if let Some(address) = facts.client_address {
        pairs.push((
            "client_address".into(),
            RestrictedExpression::new_ip(address.to_string()),
        ));
    }
    pairs
}

/// The time, to the second, as a Cedar `datetime`: made once a second, since making one costs
/// more than the rest of a decision.
fn now() -> RestrictedExpression {
    static NOW: std::sync::Mutex<Option<(i64, RestrictedExpression)>> = std::sync::Mutex::new(None);
    let now = jiff::Timestamp::now();
    let second = now.as_second();
    let mut cached = NOW.lock().unwrap_or_else(|e| e.into_inner());
    match &*cached {
        Some((at, time)) if *at == second => time.clone(),
        _ => {
            let text = now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
            let time = RestrictedExpression::new_datetime(text);
            *cached = Some((second, time.clone()));
            time
        }
    }
}

const COMMON_CONTEXT: &str = r#""protocol_version"?: String, "client_address"?: __cedar::ipaddr, "time": __cedar::datetime, "replica": String"#;

/// The Cedar schema of what `registry` serves, with the claims `claims` declares.
pub fn schema(registry: &Registry, claims: &Claims) -> String {
    let claims = Shape::Record(
        claims
            .iter()
            .map(|(name, kind)| {
                let attribute = crate::policy::shape::Attribute {
                    shape: kind.shape(),
                    required: false,
                };
                (name.clone(), attribute)
            })
            .collect(),
    );
    let mut out = String::from(
        "// The Cedar schema of what this moat serves (`moat policy schema`).\nnamespace Moat {\n",
    );
    out.push_str("  entity Group;\n");
    out.push_str(&format!(
        "  entity Principal in [Group] = {{ \"name\": String, \"authenticated_by\": String, \"groups\": Set<String>, \"scopes\": Set<String>, \"client_id\"?: String, \"subject\"?: String, \"key\"?: String, \"claims\": {} }};\n",
        claims.cedar()
    ));
    out.push_str("  entity Plugin = { \"name\": String, \"source\": String, \"digest\": String, \"publisher\"?: String };\n");
    out.push_str("  entity Tool in [Plugin] = { \"name\": String, \"plugin\": String, \"title\"?: String, \"annotations\": { \"read_only\": Bool, \"destructive\": Bool, \"idempotent\": Bool, \"open_world\": Bool } };\n");
    out.push_str("  entity Prompt in [Plugin] = { \"name\": String, \"plugin\": String };\n");
    out.push_str("  entity Resource in [Plugin] = { \"name\": String, \"plugin\": String };\n");
    out.push_str(
        "  entity Host in [Plugin] = { \"scheme\": String, \"host\": String, \"port\": Long };\n\n",
    );
    out.push_str("  action call_tool;\n  action get_prompt;\n");
    for (_, tool) in registry.tools() {
        out.push_str(&format!(
            "  action {} in [call_tool] appliesTo {{ principal: [Principal], resource: [Tool], context: {{ \"arguments\": {}, {COMMON_CONTEXT} }} }};\n",
            quoted(&format!("call_tool:{}", tool.name)),
            Shape::of_arguments(&tool.input_schema).cedar()
        ));
    }
    for (_, prompt) in registry.prompts() {
        out.push_str(&format!(
            "  action {} in [get_prompt] appliesTo {{ principal: [Principal], resource: [Prompt], context: {{ \"arguments\": {}, {COMMON_CONTEXT} }} }};\n",
            quoted(&format!("get_prompt:{}", prompt.name)),
            prompt_arguments(prompt).cedar()
        ));
    }
    out.push_str(&format!(
        "  action read_resource appliesTo {{ principal: [Principal], resource: [Resource], context: {{ \"uri\": String, {COMMON_CONTEXT} }} }};\n"
    ));
    out.push_str(&format!(
        "  action complete appliesTo {{ principal: [Principal], resource: [Prompt, Resource], context: {{ \"argument\": String, \"value\": String, {COMMON_CONTEXT} }} }};\n"
    ));
    out.push_str(&format!(
        "  action reach appliesTo {{ principal: [Principal], resource: [Host], context: {{ \"method\": String, \"path\": String, \"tool\": String, {COMMON_CONTEXT} }} }};\n"
    ));
    out.push_str("}\n");
    out
}

/// A prompt's arguments: strings, the required ones required.
pub fn prompt_arguments(prompt: &Prompt) -> Shape {
    Shape::Record(
        prompt
            .arguments
            .iter()
            .map(|argument| {
                let attribute = crate::policy::shape::Attribute {
                    shape: Shape::String,
                    required: argument.required,
                };
                (argument.name.clone(), attribute)
            })
            .collect(),
    )
}
