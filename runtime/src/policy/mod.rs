//! Policies in Cedar: who may call which tool with which arguments, get which prompt, read which
//! resource, and where a running call may then send requests.
//!
//! The policy files the enterprise policy and `moat.toml` name are read at each load, checked
//! against the Cedar schema of what is served ([`model::schema`], typed by each tool's
//! arguments) and kept as one set: never parsed per request. Once any policy is given, what no
//! policy permits is denied, and a `forbid` beats every `permit`, so the enterprise's `forbid`s
//! hold whatever `moat.toml` permits. With none, Cedar decides nothing and everything the
//! `[[access]]` rules allow is allowed.
//!
//! - [`shape`]: tools' argument schemas as Cedar types, and arguments as Cedar values;
//! - [`model`]: the schema and the entities of a request;
//! - [`load`]: reading, naming and validating policy files;
//! - [`explain`]: the `[[access]]` rules as the Cedar they amount to.

mod decide;
pub mod explain;
pub mod load;
pub mod model;
pub mod shape;

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::{Result, anyhow};
use cedar_policy::{
    ActionConstraint, Entities, Entity, EntityUid, PolicySet, RestrictedExpression, Schema,
};
use serde_json::{Map, Value};

use crate::access::Principal;
use crate::plugin::registry::Registry;
pub use load::{Author, PolicyFile};
pub use model::{ClaimType, Claims, Facts, Outgoing};
use shape::Shape;

/// Where the policies come from, as the configuration names them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    /// The enterprise's files first, then moat.toml's.
    pub files: Vec<PolicyFile>,
    pub claims: Claims,
}

/// What Cedar decided, and which policies decided it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Allowed; `by` are the permits that allowed it (none when no policy is given).
    Allowed { by: Vec<String> },
    /// Denied by the `forbid`s in `by`, or by no permit when `by` is empty; `message` says so
    /// in words a model can act on.
    Denied { by: Vec<String>, message: String },
    /// The arguments do not have the types the tool declares.
    Invalid(String),
}

impl Verdict {
    /// The policies that decided, for the audit line.
    pub fn policies(&self) -> &[String] {
        match self {
            Verdict::Allowed { by } | Verdict::Denied { by, .. } => by,
            Verdict::Invalid(_) => &[],
        }
    }
}

/// The policies in force, with what they decide over; cheap to share.
#[derive(Clone, Default)]
pub struct Policies {
    loaded: Option<Arc<Loaded>>,
}

struct Loaded {
    set: PolicySet,
    /// Each policy's `@reason`, for denials.
    reasons: HashMap<String, String>,
    claims: Claims,
    plugins: HashMap<String, Entity>,
    /// Each tool: what its calls are decided about.
    tools: HashMap<String, Target>,
    /// Each prompt, likewise (its arguments are strings).
    prompts: HashMap<String, Target>,
    /// Each resource and template, for `read_resource` (its shape unused).
    resources: HashMap<String, Target>,
    /// The policies that can decide a `reach`, and a `complete`.
    reach: PolicySet,
    complete: PolicySet,
    /// Each principal's entity as last made, while it stays the same principal.
    principals: std::sync::Mutex<HashMap<String, (Principal, Entity)>>,
    /// The files read, to compare loads with.
    settings: Settings,
    /// What was read: the files' texts, the claims and the schema they were checked against.
    fingerprint: String,
}

/// What requests about one tool, prompt or resource are decided about, made once per load.
struct Target {
    resource: Entity,
    action: Entity,
    shape: Shape,
    /// The resource, its plugin and the action: every request's entities but its principal.
    entities: Entities,
    /// The policies whose action scope can hold for its action: the others can neither permit
    /// nor forbid it, so the authorizer is spared them.
    policies: PolicySet,
}

impl Target {
    fn new(
        (resource, action, shape): (Entity, (EntityUid, &str), Shape),
        plugins: &HashMap<String, Entity>,
        set: &PolicySet,
    ) -> Self {
        let (action, group) = action;
        let policies = for_action(set, &action, group);
        let action = model::member_action(action, group);
        let plugin = decide::plugin_name(&resource).and_then(|name| plugins.get(&name).cloned());
        let entities = [resource.clone(), action.clone()].into_iter().chain(plugin);
        let entities = Entities::from_entities(entities, None)
            .expect("a tool, its plugin and its action are distinct entities");
        Self {
            resource,
            action,
            shape,
            entities,
            policies,
        }
    }
}

/// The policies of `set` whose action scope holds for `action`, a member of the action group
/// `group` (none when empty).
fn for_action(set: &PolicySet, action: &EntityUid, group: &str) -> PolicySet {
    let group = (!group.is_empty()).then(|| model::action(group));
    let mut subset = PolicySet::new();
    for policy in set.policies() {
        let applies = match policy.action_constraint() {
            ActionConstraint::Any => true,
            ActionConstraint::Eq(only) => only == *action,
            ActionConstraint::In(among) => among
                .iter()
                .any(|a| a == action || group.as_ref() == Some(a)),
        };
        if applies {
            subset
                .add(policy.clone())
                .expect("a policy of a set is not a template and its id is unique");
        }
    }
    subset
}

/// What is decided on its typed arguments.
enum Typed<'a> {
    Tool(&'a str),
    Prompt(&'a str),
}

/// What a completion completes an argument of.
pub enum Completed<'a> {
    Prompt(&'a str),
    Resource(&'a str),
}

impl Policies {
    /// No policy: Cedar allows everything.
    pub fn none() -> Self {
        Self::default()
    }

    /// Whether any policy is in force.
    pub fn is_given(&self) -> bool {
        self.loaded.is_some()
    }

    /// The number of policies in force.
    pub fn len(&self) -> usize {
        self.loaded.as_ref().map_or(0, |l| l.set.policies().count())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The Cedar schema of what `registry` serves, parsed.
    pub fn schema(registry: &Registry, claims: &Claims) -> Result<Schema> {
        parsed(&model::schema(registry, claims))
    }

    /// Reads the policies `settings` names for what `registry` serves, `sources` saying where
    /// each plugin came from; any error in any file fails the whole load.
    pub fn load(
        settings: &Settings,
        registry: &Registry,
        sources: &HashMap<String, String>,
    ) -> Result<Self> {
        if settings.files.is_empty() {
            return Ok(Self::none());
        }
        // Made once: parsed to check the policies, and part of what the load is known by.
        let schema_text = model::schema(registry, &settings.claims);
        let schema = parsed(&schema_text)?;
        let (set, origins) = load::read(&settings.files, &schema)?;
        let mut fingerprint = format!("{:?}\n{schema_text}", settings.claims);
        let mut texts: Vec<&str> = origins.iter().map(|(_, o)| &*o.text).collect();
        texts.dedup();
        for text in texts {
            fingerprint.push_str(text);
        }
        let reasons = set
            .policies()
            .filter_map(|p| Some((p.id().to_string(), p.annotation("reason")?.to_string())))
            .collect();
        let plugins: HashMap<String, Entity> = registry
            .plugins()
            .iter()
            .map(|p| {
                let source = sources.get(&*p.name).map_or("", String::as_str);
                (p.name.to_string(), model::plugin(p, source))
            })
            .collect();
        let tools = registry
            .tools()
            .map(|(p, t)| {
                let shape = Shape::of_arguments(&t.input_schema);
                let action = (model::call_action(&t.name), "call_tool");
                let target = Target::new((model::tool(p, t), action, shape), &plugins, &set);
                (t.name.clone(), target)
            })
            .collect();
        let prompts = registry
            .prompts()
            .map(|(p, prompt)| {
                let shape = model::prompt_arguments(prompt);
                let action = (model::prompt_action(&prompt.name), "get_prompt");
                let target = Target::new((model::prompt(p, prompt), action, shape), &plugins, &set);
                (prompt.name.clone(), target)
            })
            .collect();
        let resources = registry
            .resources()
            .map(|(p, r)| {
                let action = (model::action("read_resource"), "");
                let shape = Shape::Record(Default::default());
                let target = Target::new((model::resource(p, r), action, shape), &plugins, &set);
                (r.name.clone(), target)
            })
            .collect();
        let reach = for_action(&set, &model::action("reach"), "");
        let complete = for_action(&set, &model::action("complete"), "");
        Ok(Self {
            loaded: Some(Arc::new(Loaded {
                set,
                reasons,
                claims: settings.claims.clone(),
                plugins,
                tools,
                prompts,
                resources,
                reach,
                complete,
                principals: Default::default(),
                settings: settings.clone(),
                fingerprint,
            })),
        })
    }

    /// What these policies were read from, to tell whether a load changed anything.
    pub fn fingerprint(&self) -> Option<&str> {
        self.loaded.as_ref().map(|l| l.fingerprint.as_str())
    }

    /// The files and claims these policies were read from.
    pub fn settings(&self) -> Settings {
        self.loaded
            .as_ref()
            .map(|l| l.settings.clone())
            .unwrap_or_default()
    }

    /// May `principal` call `tool` with `arguments`?
    pub fn call_tool(
        &self,
        principal: &Principal,
        tool: &str,
        arguments: Option<&Map<String, Value>>,
        facts: &Facts,
    ) -> Verdict {
        self.with_arguments(principal, Typed::Tool(tool), arguments, facts)
    }

    /// May `principal` get `prompt` with `arguments`?
    pub fn get_prompt(
        &self,
        principal: &Principal,
        prompt: &str,
        arguments: Option<&Map<String, Value>>,
        facts: &Facts,
    ) -> Verdict {
        self.with_arguments(principal, Typed::Prompt(prompt), arguments, facts)
    }

    /// A call of a tool or a get of a prompt, decided on its arguments.
    fn with_arguments(
        &self,
        principal: &Principal,
        of: Typed<'_>,
        arguments: Option<&Map<String, Value>>,
        facts: &Facts,
    ) -> Verdict {
        let Some(loaded) = &self.loaded else {
            return Verdict::Allowed { by: vec![] };
        };
        let (found, what) = match of {
            Typed::Tool(name) => (loaded.tools.get(name), format!("call tool `{name}`")),
            Typed::Prompt(name) => (loaded.prompts.get(name), format!("get prompt `{name}`")),
        };
        let Some(target) = found else {
            return loaded.unknown(&what);
        };
        let arguments = Value::Object(arguments.cloned().unwrap_or_default());
        let arguments = match target.shape.value(&arguments) {
            Ok(arguments) => arguments,
            Err(why) => return Verdict::Invalid(why),
        };
        let what = format!("{what} with these arguments");
        let context = ("arguments", arguments);
        loaded.decide(principal, target, context, facts, &what)
    }

    /// May `principal` read `uri`, a URI of `resource`?
    pub fn read_resource(
        &self,
        principal: &Principal,
        resource: &str,
        uri: &str,
        facts: &Facts,
    ) -> Verdict {
        let Some(loaded) = &self.loaded else {
            return Verdict::Allowed { by: vec![] };
        };
        let Some(target) = loaded.resources.get(resource) else {
            return loaded.unknown(&format!("resource `{resource}`"));
        };
        let uri_value = RestrictedExpression::new_string(uri.to_string());
        let what = format!("read `{uri}`");
        loaded.decide(principal, target, ("uri", uri_value), facts, &what)
    }

    /// May `principal` have completions for `argument` (now `value`) of `of`?
    pub fn complete(
        &self,
        principal: &Principal,
        of: Completed<'_>,
        argument: &str,
        value: &str,
        facts: &Facts,
    ) -> Verdict {
        let Some(loaded) = &self.loaded else {
            return Verdict::Allowed { by: vec![] };
        };
        let target = match of {
            Completed::Prompt(name) => loaded.prompts.get(name),
            Completed::Resource(name) => loaded.resources.get(name),
        };
        let Some(target) = target else {
            return loaded.unknown("what is completed");
        };
        let mut context = model::common_context(facts);
        for (name, value) in [("argument", argument), ("value", value)] {
            context.push((name.into(), RestrictedExpression::new_string(value.into())));
        }
        let what = format!("complete `{argument}`");
        let on = (model::action("complete"), target.resource.uid());
        let entities = target.entities.clone();
        loaded.decide_with(principal, on, (entities, &loaded.complete), context, &what)
    }

    /// May `principal`'s call of `tool`, a tool of `plugin`, send `outgoing`?
    pub fn reach(
        &self,
        principal: &Principal,
        plugin: &str,
        tool: &str,
        outgoing: &Outgoing<'_>,
        facts: &Facts,
    ) -> Verdict {
        let Some(loaded) = &self.loaded else {
            return Verdict::Allowed { by: vec![] };
        };
        let host = model::host(plugin, outgoing);
        let mut context = model::common_context(facts);
        for (name, value) in [
            ("method", outgoing.method),
            ("path", outgoing.path),
            ("tool", tool),
        ] {
            context.push((name.into(), RestrictedExpression::new_string(value.into())));
        }
        let on = (model::action("reach"), host.uid());
        let sender = loaded.plugins.get(plugin).cloned();
        let Ok(entities) = Entities::from_entities([host].into_iter().chain(sender), None) else {
            return loaded.unknown(&format!("plugin `{plugin}`"));
        };
        let what = format!(
            "reach {}://{}:{} from tool `{tool}`",
            outgoing.scheme, outgoing.host, outgoing.port
        );
        loaded.decide_with(principal, on, (entities, &loaded.reach), context, &what)
    }

    /// Whether `principal` may be shown `tool` in a list: whether some arguments could be
    /// allowed (Cedar's partial evaluation, the arguments unknown, is not a sure denial).
    pub fn lists_tool(&self, principal: &Principal, tool: &str, facts: &Facts) -> bool {
        self.lists(principal, |l| &l.tools, tool, "arguments", facts)
    }

    /// As [`Policies::lists_tool`], for a prompt.
    pub fn lists_prompt(&self, principal: &Principal, prompt: &str, facts: &Facts) -> bool {
        self.lists(principal, |l| &l.prompts, prompt, "arguments", facts)
    }

    /// As [`Policies::lists_tool`], for a resource or template, its URI unknown.
    pub fn lists_resource(&self, principal: &Principal, resource: &str, facts: &Facts) -> bool {
        self.lists(principal, |l| &l.resources, resource, "uri", facts)
    }

    /// Whether `principal` may be shown the item `name` of the targets `among` picks, the
    /// context attribute `unknown` unknown. Everything is shown when no policy is given.
    fn lists(
        &self,
        principal: &Principal,
        among: fn(&Loaded) -> &HashMap<String, Target>,
        name: &str,
        unknown: &str,
        facts: &Facts,
    ) -> bool {
        let Some(loaded) = &self.loaded else {
            return true;
        };
        let Some(target) = among(loaded).get(name) else {
            return false;
        };
        loaded.could_allow(principal, target, unknown, facts)
    }
}

/// A Cedar schema moat wrote, parsed.
fn parsed(text: &str) -> Result<Schema> {
    Schema::from_cedarschema_str(text)
        .map(|(schema, _)| schema)
        .map_err(|e| anyhow!("moat made a Cedar schema Cedar refuses: {e}\n{text}"))
}
