//! A plugin: one compiled component, the tools found in its type, and how to call them.
//!
//! Every call gets a fresh instance from a pre-linked [`InstancePre`] and a store of its own, so
//! no state survives a call and calls never wait on each other.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use tokio::sync::Semaphore;

use anyhow::{Context, Result, bail};
use rmcp::model::{CallToolResult, JsonObject};
use wasmtime::component::{ComponentExportIndex, Type};

use crate::sandbox::footprint::Footprint;
use crate::sandbox::grants::Grants;
use crate::sandbox::host::{Client, EventSink, Question};
use crate::sandbox::instances::Instances;
use crate::sandbox::limits::Limits;
use crate::sandbox::network::CallCredentials;
use crate::supply::lock::{self, Entry};
use crate::supply::source::{Digest, Fetched, Source};
use crate::wit::constraints::Check;
use crate::wit::docs::PluginDocs;
use crate::wit::naming::ToolRules;
use crate::wit::output::Returns;
use crate::wit::references::References;
use crate::wit::values::{ArgError, args_from_json};

mod call;
pub mod completions;
mod discover;
mod forms;
pub mod lint;
pub mod prompts;
pub mod registry;
pub mod resources;
mod served;
pub mod tiers;

use completions::Completions;
use discover::discover;
use prompts::Prompt;
use resources::Resource;
use tiers::Compiler;

/// The most schema nodes (see [`Budget`]) one tool's input and output schemas may have together.
/// The largest bundled tool has a few hundred; this leaves room for big real-world types while
/// keeping one tool's schemas to a few MiB.
pub const MAX_TOOL_SCHEMA_NODES: usize = 20_000;

/// The most schema nodes all of a plugin's tools may have together: bounds what a load (and
/// every reload) allocates for one plugin to some tens of MiB.
pub const MAX_PLUGIN_SCHEMA_NODES: usize = 100_000;

/// The most tools one plugin may export: far above any real plugin, and small enough that a
/// tool list stays readable for a model.
pub const MAX_TOOLS: usize = 1_000;

/// A loaded plugin.
pub struct Plugin {
    pub name: Arc<str>,
    /// What the plugin says of itself (its world's doc comment), if anything.
    pub summary: Option<String>,
    pub tools: Vec<Tool>,
    /// Its prompts, in name order.
    pub prompts: Vec<Prompt>,
    /// Its resources and resource templates, in name order.
    pub resources: Vec<Resource>,
    completions: Completions,
    /// Its elicitation forms, by function name.
    forms: Arc<forms::Forms>,
    /// The URI scheme of its resources (see [`crate::wit::naming::resource_scheme`]).
    pub scheme: Arc<str>,
    /// Exported functions that offer nothing, with the reason.
    pub skipped: Vec<(String, String)>,
    /// The MCP names of its functions, for the errors its tools return.
    references: Arc<References>,
    /// The names of the interfaces the component imports.
    pub imports: Vec<String>,
    /// The sha256 of the component: what identifies this plugin, whatever its source.
    pub digest: Digest,
    pub limits: Limits,
    pub grants: Grants,
    /// Its digest, publisher and manifest, and what became of each grant (set by the registry).
    pub admission: crate::supply::policy::Admitted,
    /// Where each call's fresh instance comes from.
    instances: Arc<Instances>,
    /// The `handle` of a plugin that is an MCP server (see [`served`]).
    server: Option<ComponentExportIndex>,
    /// Whether it was loaded with Winch's code (see [`tiers`]).
    baseline: bool,
    /// Whether its code was taken from the compiled-plugin cache rather than compiled.
    from_cache: bool,
    /// One permit per call allowed to run at once.
    slots: Semaphore,
    /// Calls waiting for a permit.
    queued: AtomicUsize,
}

/// One exported function, as an MCP tool.
pub struct Tool {
    /// The tool's MCP name (see [`tool_name`]).
    pub name: String,
    /// Where the function is exported: `interface#function` or `function`.
    pub export: String,
    pub description: String,
    /// Whether the description is the plugin's own, not one moat made up.
    pub documented: bool,
    /// Its display title and annotations, from its doc tags (see [`crate::wit::tags`]).
    pub title: Option<String>,
    pub annotations: Option<rmcp::model::ToolAnnotations>,
    /// Whether it runs only as a task (`@task required`).
    pub task_required: bool,
    pub input_schema: Arc<JsonObject>,
    pub output_schema: Option<Arc<JsonObject>>,
    runs: Runs,
}

/// How a tool runs.
enum Runs {
    /// As an exported function of the component.
    Function {
        /// The check of what `@schema` tags add to the parameters' types, if they add anything.
        check: Option<Arc<Check>>,
        params: Vec<(String, Type)>,
        returns: Returns,
        index: ComponentExportIndex,
    },
    /// As a tool of an MCP server component: a `tools/call` of its own `name`, with arguments
    /// checked against its input schema first.
    Served { name: String, check: Arc<Check> },
}

impl Tool {
    /// The parameters of a function's call from its JSON `args`, checked against their types and
    /// then against what the tool's `@schema` tags add, before any guest code runs.
    fn arguments(
        check: Option<&Check>,
        params: &[(String, Type)],
        args: Option<&JsonObject>,
    ) -> Result<Vec<wasmtime::component::Val>, ArgError> {
        let params = args_from_json(params, args)?;
        if let Some(check) = check {
            check.check(&serde_json::Value::Object(
                args.cloned().unwrap_or_default(),
            ))?;
        }
        Ok(params)
    }
}

/// What one call produced, and every access the host denied it while it ran (for an audit log).
#[derive(Debug)]
pub struct CallOutcome {
    pub result: Result<CallToolResult, CallError>,
    /// Each denial's message as logs and the audit record it (a consent link only as its digest),
    /// such as `network access to evil.example:443 denied: not granted to plugin "fetch"`.
    pub denials: Vec<String>,
}

/// Why a call produced no result.
#[derive(Debug)]
pub enum CallError {
    /// The arguments do not fit the tool's parameters; the guest never ran.
    InvalidArguments(ArgError),
    /// The guest ran past its deadline and was stopped.
    DeadlineExceeded(Duration),
    /// The guest burnt all the fuel it was given and was stopped.
    OutOfFuel(u64),
    /// The guest trapped: a panic, `unreachable`, out of memory, an output flood…
    Trap { message: String, stderr: String },
    /// The guest returned something moat cannot hand on.
    BadResult(String),
    /// Too many calls of this plugin are running or waiting.
    Busy { running: usize, queued: usize },
    /// The host could not set the call up (a granted directory vanished, the pool is full…).
    Setup(String),
    /// The guest asked the client questions that a later request answers (2026-07-28); the
    /// call stopped there.
    InputRequired(Vec<Question>),
    /// The guest asked something that needs this client capability, which the request did not
    /// declare.
    MissingCapability(&'static str),
    /// The guest asked to go on as a task, and the client follows tasks: the call stopped
    /// there, to run again as a task.
    Detached,
}

/// Where a request's guest sends its reports and questions.
#[derive(Default)]
pub struct Exchange {
    pub events: EventSink,
    pub client: Option<Arc<dyn Client>>,
    /// The caller's credentials, for the headers moat injects from `[credentials]`.
    pub credentials: Option<Arc<dyn CallCredentials>>,
    /// The caller's policy over where the call's requests may go (`reach`), after the grants.
    pub reach: Option<Arc<dyn crate::sandbox::network::CallReach>>,
}

/// One export of the component, and the name its log lines go under.
#[derive(Clone, Copy)]
pub(crate) struct Export<'a> {
    name: &'a str,
    index: ComponentExportIndex,
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::InvalidArguments(e) => write!(f, "invalid arguments: {e}"),
            CallError::DeadlineExceeded(d) => {
                write!(
                    f,
                    "the tool ran longer than its {d:?} deadline and was stopped"
                )
            }
            CallError::OutOfFuel(units) => {
                write!(
                    f,
                    "the tool ran out of fuel ({units} units) and was stopped"
                )
            }
            CallError::Trap { message, stderr } if stderr.is_empty() => {
                write!(f, "the tool crashed: {message}")
            }
            CallError::Trap { message, stderr } => {
                write!(f, "the tool crashed: {message}\nits last output:\n{stderr}")
            }
            CallError::BadResult(e) => write!(f, "the tool returned an unusable result: {e}"),
            CallError::Busy { running, queued } => write!(
                f,
                "the plugin is busy ({running} calls running, {queued} waiting); try again later"
            ),
            CallError::Setup(e) => write!(f, "the call could not start: {e}"),
            CallError::InputRequired(questions) => {
                write!(
                    f,
                    "the tool waits for {} answer(s) from the client",
                    questions.len()
                )
            }
            CallError::Detached => write!(f, "the call goes on as a task"),
            CallError::MissingCapability(capability) => write!(
                f,
                "the tool needs the `{capability}` client capability, which the request did not \
                 declare"
            ),
        }
    }
}

impl Plugin {
    /// Calls of this plugin running now.
    pub fn calls_running(&self) -> usize {
        self.limits
            .max_concurrent_calls
            .saturating_sub(self.slots.available_permits())
    }

    /// The full URI of `path` (a resource's URI as the plugin declares it) under its scheme.
    pub fn uri(&self, path: &impl std::fmt::Display) -> String {
        format!("{}://{path}", self.scheme)
    }

    /// Its elicitation forms: each name, and the schema the client is sent.
    pub fn forms(&self) -> impl Iterator<Item = (&str, &serde_json::Value)> {
        self.forms
            .iter()
            .map(|(name, form)| (name.as_str(), &form.schema))
    }

    /// Whether the plugin imports `moat:plugin/client`, `moat:plugin/tasks` or (a server's)
    /// `moat:plugin/mcp-client`: only then can its guests ask the client anything or go on as
    /// a task.
    pub fn asks_client(&self) -> bool {
        const ASKING: [&str; 3] = [
            "moat:plugin/client@",
            "moat:plugin/tasks@",
            "moat:plugin/mcp-client@",
        ];
        self.imports
            .iter()
            .any(|import| ASKING.iter().any(|prefix| import.starts_with(prefix)))
    }

    /// Whether its requests carry callers' own credentials (`${credential:NAME}`): a caller
    /// may then be asked to connect their account first.
    pub fn injects_callers_credentials(&self) -> bool {
        self.admission
            .grants
            .network
            .inject
            .iter()
            .any(|i| matches!(i.value, crate::sandbox::network::Injected::Caller { .. }))
    }

    /// Whether its calls run Cranelift's optimized code now (see [`tiers`]).
    pub fn optimized(&self) -> bool {
        !self.baseline || self.instances.upgraded()
    }

    /// Whether its code was taken from the compiled-plugin cache when it was loaded, rather than
    /// compiled.
    pub fn from_cache(&self) -> bool {
        self.from_cache
    }

    /// Calls of this plugin waiting for a slot now.
    pub fn calls_queued(&self) -> usize {
        self.queued.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Compiles `fetched` and finds its tools, named as `rules` say. A plugin with no usable tool
    /// still loads (and says so).
    pub fn load(
        compiler: &Compiler<'_>,
        name: &str,
        fetched: &Fetched,
        limits: Limits,
        grants: Grants,
        rules: &ToolRules,
    ) -> Result<Self> {
        let wasm = &fetched.wasm[..];
        Footprint::of(wasm)
            .and_then(|footprint| footprint.check(&crate::sandbox::engine::pool_limits()))
            .with_context(|| format!("plugin \"{name}\" cannot load"))?;
        let compiled = compiler
            .compile(fetched)
            .with_context(|| format!("plugin \"{name}\" is not a valid WebAssembly component"))?;
        let (engine, component) = (compiled.engine, &compiled.component);
        if limits.fuel.is_some() && !engine.get_consume_fuel() {
            bail!("plugin \"{name}\" has a fuel limit, but the engine meters no fuel");
        }
        let docs = PluginDocs::from_component(wasm).unwrap_or_else(|e| {
            tracing::warn!(plugin = name, "ignoring unreadable doc comments: {e:#}");
            None
        });
        let imports: Vec<String> = component
            .component_type()
            .imports(engine)
            .map(|(name, _)| name.to_string())
            .collect();
        let unoffered: Vec<String> = imports
            .iter()
            .filter_map(|import| crate::sandbox::offered::unoffered(import))
            .collect();
        if !unoffered.is_empty() {
            bail!(
                "plugin \"{name}\" cannot link: it {}",
                unoffered.join("; it ")
            );
        }
        let pre = compiled
            .linker
            .instantiate_pre(component)
            .map_err(anyhow::Error::from)
            .with_context(|| {
                format!(
                    "plugin \"{name}\" cannot link: an interface it imports is one moat offers, \
                     with types other than moat's"
                )
            })?;
        for note in crate::sandbox::grants::ungranted(&imports, &grants) {
            tracing::info!(plugin = name, "{note}");
        }
        let server = served::handle(component);
        let mut instances = Instances::new(name.into(), pre, grants.clone(), limits.clone());
        if let Some(handle) = server {
            instances = instances.warmed_up_by(served::handshake(handle));
        }
        let instances = Arc::new(instances);
        let (discovered, instructions) = match server {
            Some(handle) => served::discover(&instances, handle, name, rules, limits.deadline)?,
            None => (
                discover(engine, component, name, rules, docs.as_ref())?,
                None,
            ),
        };
        for (export, reason) in &discovered.skipped {
            // What every component of that toolchain carries: nothing to warn of.
            tracing::debug!(plugin = name, "`{export}` is not offered: {reason}");
        }
        let references = discovered.references;
        let mut prompts = discovered.prompts;
        let mut resources = discovered.resources;
        let descriptions = prompts
            .iter_mut()
            .map(|p| &mut p.description)
            .chain(resources.iter_mut().map(|r| &mut r.description));
        for description in descriptions.flatten() {
            *description = references.rewrite(description, &[]).into_owned();
        }
        let summary = docs
            .as_ref()
            .and_then(|d| d.summary())
            .map(|summary| references.rewrite(&summary, &[]).into_owned())
            .or(instructions);
        let scheme = crate::wit::naming::resource_scheme(name);
        if scheme.is_none() && !resources.is_empty() {
            tracing::warn!(
                plugin = name,
                "its resources are not offered: a plugin name that starts with a digit cannot be \
                 a URI scheme"
            );
            resources.clear();
        }
        if compiled.baseline
            && let Some(tiers) = compiler.tiers
        {
            tiers.optimize(name, fetched, &compiled, &instances);
        }
        Ok(Self {
            name: name.into(),
            summary,
            tools: discovered.tools,
            prompts,
            resources,
            completions: discovered.completions,
            forms: Arc::new(discovered.forms),
            scheme: scheme.unwrap_or_default().into(),
            skipped: discovered.skipped,
            references: Arc::new(references),
            imports,
            digest: fetched.digest,
            slots: Semaphore::new(limits.max_concurrent_calls),
            queued: AtomicUsize::new(0),
            limits,
            grants,
            admission: Default::default(),
            baseline: compiled.baseline,
            from_cache: compiled.from_cache,
            instances,
            server,
        })
    }

    /// What the lock records of this plugin loaded from `source`: its source, digest, imports,
    /// tools and manifest requests. The one place that decides what is recorded, compared in
    /// [`lock::changes`].
    pub fn lock_entry(&self, source: &Source, base: &Path) -> Entry {
        Entry {
            source: lock::source_text(source, base),
            digest: self.digest,
            imports: self.imports.clone(),
            tools: self.tools.iter().map(|t| t.name.clone()).collect(),
            requests: self
                .admission
                .manifest
                .as_ref()
                .map(|m| m.requests())
                .unwrap_or_default(),
        }
    }
}
