//! A plugin: one compiled component, the tools found in its type, and how to call them.
//!
//! Every call gets a fresh instance from a pre-linked [`InstancePre`] and a store of its own, so
//! no state survives a call and calls never wait on each other.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::{Semaphore, SemaphorePermit};

use anyhow::{Context, Result, bail};
use rmcp::model::{CallToolResult, JsonObject};
use serde_json::Value;
use wasmtime::Engine;
use wasmtime::component::types::{ComponentFunc, ComponentItem};
use wasmtime::component::{Component, ComponentExportIndex, Linker, Type, Val};

use crate::cache::Cache;
use crate::docs::{FunctionDocs, PluginDocs};
use crate::grants::Grants;
use crate::host::{EventSink, HostState};
use crate::instances::{Fresh, Instances, MakeError};
use crate::naming::ToolRules;
use crate::network::Denials;
use crate::output::Returns;
use crate::schema::{Budget, SchemaError, object_schema};
use crate::source::{Digest, Fetched};
use crate::values::{ArgError, args_from_json};

/// The longest tool name many MCP hosts accept.
pub const MAX_TOOL_NAME: usize = 64;

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

/// How much one call may use.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Wall-clock time a call may take, instantiation included.
    pub deadline: Duration,
    /// The most linear memory the instance may grow to.
    pub max_memory_bytes: usize,
    /// The most the guest may write to stdout, and again to stderr.
    pub max_output_bytes: usize,
    /// The largest result a call may return, counted as the bytes of its strings and lists.
    pub max_result_bytes: usize,
    /// Calls of this plugin that may run at once.
    pub max_concurrent_calls: usize,
    /// Calls that may wait for a free slot; one more fails at once.
    pub max_queued_calls: usize,
    /// Fuel a call may burn (about one unit per Wasm instruction), or `None` for no count; only
    /// on an engine built with fuel metering.
    pub fuel: Option<u64>,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            deadline: Duration::from_secs(30),
            max_memory_bytes: 256 << 20,
            max_output_bytes: 64 << 10,
            max_result_bytes: 4 << 20,
            max_concurrent_calls: 16,
            max_queued_calls: 64,
            fuel: None,
        }
    }
}

/// A loaded plugin.
pub struct Plugin {
    pub name: Arc<str>,
    /// What the plugin says of itself (its world's doc comment), if anything.
    pub summary: Option<String>,
    pub tools: Vec<Tool>,
    /// Exported functions that are not tools, with the reason.
    pub skipped: Vec<(String, String)>,
    /// The names of the interfaces the component imports.
    pub imports: Vec<String>,
    /// The sha256 of the component: what identifies this plugin, whatever its source.
    pub digest: Digest,
    pub limits: Limits,
    pub grants: Grants,
    /// Its digest, publisher and manifest, and what became of each grant (set by the registry).
    pub admission: crate::policy::Admitted,
    /// Where each call's fresh instance comes from.
    instances: Arc<Instances>,
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
    pub input_schema: Arc<JsonObject>,
    pub output_schema: Option<Arc<JsonObject>>,
    params: Vec<(String, Type)>,
    returns: Returns,
    index: ComponentExportIndex,
}

/// What one call produced, and every access the host denied it while it ran (for an audit log).
#[derive(Debug)]
pub struct CallOutcome {
    pub result: Result<CallToolResult, CallError>,
    /// Each denial's message, such as `network access to evil.example:443 denied: not granted
    /// to plugin "fetch"`, in the order they happened.
    pub denials: Vec<String>,
}

/// A result turned into a tool error that names the call's denials first, then whatever the
/// guest itself answered.
fn with_denials(result: CallToolResult, denials: &[String]) -> CallToolResult {
    if denials.is_empty() {
        return result;
    }
    let mut content = vec![rmcp::model::ContentBlock::text(denials.join("\n"))];
    content.extend(result.content);
    CallToolResult::error(content)
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
        }
    }
}

/// The error the epoch callback raises at the deadline, to tell it from other traps.
#[derive(Debug)]
pub(crate) struct DeadlineExceeded;

impl std::fmt::Display for DeadlineExceeded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("deadline exceeded")
    }
}

impl std::error::Error for DeadlineExceeded {}

impl Plugin {
    /// Compiles `wasm` and finds its tools, named as `rules` say. A plugin with no usable tool
    /// still loads (and says so).
    #[allow(clippy::too_many_arguments)]
    pub fn load(
        engine: &Engine,
        linker: &Linker<HostState>,
        name: &str,
        fetched: &Fetched,
        limits: Limits,
        grants: Grants,
        rules: &ToolRules,
        cache: Option<&Cache>,
    ) -> Result<Self> {
        let wasm = &fetched.wasm[..];
        let component = match cache {
            Some(cache) => cache.component(engine, wasm, &fetched.digest),
            None => Component::new(engine, wasm).map_err(anyhow::Error::from),
        }
        .with_context(|| format!("plugin \"{name}\" is not a valid WebAssembly component"))?;
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
        let pre = linker
            .instantiate_pre(&component)
            .map_err(anyhow::Error::from)
            .with_context(|| {
                format!("plugin \"{name}\" needs an import that moat does not offer")
            })?;
        for note in crate::grants::ungranted(&imports, &grants) {
            tracing::info!(plugin = name, "{note}");
        }
        let (tools, skipped) = discover_tools(engine, &component, name, rules, docs.as_ref())?;
        for (export, reason) in &skipped {
            tracing::warn!(
                plugin = name,
                "`{export}` is not offered as a tool: {reason}"
            );
        }
        let instances = Instances::new(name.into(), pre, grants.clone(), limits.clone());
        Ok(Self {
            name: name.into(),
            summary: docs.as_ref().and_then(|d| d.summary()).map(str::to_string),
            tools,
            skipped,
            imports,
            digest: fetched.digest,
            slots: Semaphore::new(limits.max_concurrent_calls),
            queued: AtomicUsize::new(0),
            limits,
            grants,
            admission: Default::default(),
            instances: Arc::new(instances),
        })
    }

    /// Runs `tool` with `args` in a new instance.
    pub async fn call(
        &self,
        tool: &Tool,
        args: Option<&JsonObject>,
        events: EventSink,
    ) -> Result<CallToolResult, CallError> {
        self.call_outcome(tool, args, events).await.result
    }

    /// Runs `tool` with `args` in a new instance, and tells what the host denied it on the way.
    /// A call that was denied network access is a tool error naming each denial, even when the
    /// guest swallowed its own error.
    pub async fn call_outcome(
        &self,
        tool: &Tool,
        args: Option<&JsonObject>,
        events: EventSink,
    ) -> CallOutcome {
        let mut denials = Denials::default();
        let result = self.run(tool, args, events, &mut denials).await;
        let denials = denials.take();
        let result = result.map(|r| with_denials(r, &denials));
        CallOutcome { result, denials }
    }

    async fn run(
        &self,
        tool: &Tool,
        args: Option<&JsonObject>,
        events: EventSink,
        denials: &mut Denials,
    ) -> Result<CallToolResult, CallError> {
        let params = args_from_json(&tool.params, args).map_err(CallError::InvalidArguments)?;
        let limits = &self.limits;
        let _slot = self.take_slot().await?;
        let deadline = Instant::now() + limits.deadline;
        let (mut store, instance, output) = match self.instances.take(deadline).await {
            Ok(Fresh {
                store,
                instance,
                output,
            }) => (store, instance, output),
            Err(MakeError::Setup(message)) => return Err(CallError::Setup(message)),
            Err(MakeError::Instantiate { error, stderr }) => {
                return Err(self.failure(&error, &stderr));
            }
        };
        store.data_mut().set_events(events);
        *denials = store.data().denials();

        let run = async {
            let func = instance
                .get_func(&mut store, tool.index)
                .expect("the export was found in the component's type");
            let mut results = vec![Val::Bool(false); func.ty(&store).results().len()];
            func.call_async(&mut store, &params, &mut results).await?;
            wasmtime::Result::<_>::Ok(results)
        };
        // The epoch stops a guest that computes; this timer stops one blocked in the host (a
        // sleep, a slow read) at the same deadline.
        let outcome = tokio::time::timeout_at(deadline.into(), run)
            .await
            .unwrap_or_else(|_| Err(DeadlineExceeded.into()));
        // The call's reports end here (the server flushes them before answering); the used store
        // goes away, and the next call's instance is made, after the answer.
        store.data_mut().set_events(None);
        self.instances.replace(store);

        let stdout = String::from_utf8_lossy(&output.stdout.contents()).into_owned();
        let stderr = String::from_utf8_lossy(&output.stderr.contents()).into_owned();
        for (stream, text) in [("stdout", &stdout), ("stderr", &stderr)] {
            if !text.is_empty() {
                tracing::info!(
                    plugin = &*self.name,
                    tool = tool.name,
                    "guest {stream}: {}",
                    text.trim_end()
                );
            }
        }
        let results = outcome.map_err(|e| self.failure(&e, &stderr))?;
        let size: usize = results.iter().map(value_size).sum();
        if size > limits.max_result_bytes {
            return Err(CallError::BadResult(format!(
                "it is {size} bytes, more than the {} bytes allowed",
                limits.max_result_bytes
            )));
        }
        tool.returns
            .render(results.first())
            .map_err(CallError::BadResult)
    }

    /// Why a call that ended in an error failed, for the client.
    fn failure(&self, error: &wasmtime::Error, stderr: &str) -> CallError {
        if error.downcast_ref::<DeadlineExceeded>().is_some() {
            return CallError::DeadlineExceeded(self.limits.deadline);
        }
        if let (Some(units), Some(wasmtime::Trap::OutOfFuel)) =
            (self.limits.fuel, error.downcast_ref::<wasmtime::Trap>())
        {
            return CallError::OutOfFuel(units);
        }
        let hostcall_fuel_spent = error
            .chain()
            .any(|cause| cause.to_string().contains("fuel allocated for hostcalls"));
        if hostcall_fuel_spent {
            return CallError::BadResult(format!(
                "the guest handed over more than the {} bytes allowed at once",
                self.limits.max_result_bytes
            ));
        }
        CallError::Trap {
            message: trap_message(error),
            stderr: last_lines(stderr, 10),
        }
    }
}

impl Plugin {
    /// Waits for one of the plugin's call slots, in a bounded queue: when the queue is full, or the
    /// wait outlasts the call's deadline, the call fails instead of piling up.
    async fn take_slot(&self) -> Result<SemaphorePermit<'_>, CallError> {
        if let Ok(permit) = self.slots.try_acquire() {
            return Ok(permit);
        }
        let busy = || CallError::Busy {
            running: self.limits.max_concurrent_calls,
            queued: self.queued.load(Ordering::Relaxed),
        };
        if self.queued.fetch_add(1, Ordering::AcqRel) >= self.limits.max_queued_calls {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            return Err(busy());
        }
        let permit = tokio::time::timeout(self.limits.deadline, self.slots.acquire()).await;
        self.queued.fetch_sub(1, Ordering::AcqRel);
        match permit {
            Ok(Ok(permit)) => Ok(permit),
            _ => Err(busy()),
        }
    }
}

/// Exported functions that are not tools: (export, why).
type Skipped = Vec<(String, String)>;

/// Every exported function, at the top level or in an exported instance, is a tool, unless
/// `rules` hide it. Too many tools, or schemas too large, refuse the whole plugin.
fn discover_tools(
    engine: &Engine,
    component: &Component,
    plugin: &str,
    rules: &ToolRules,
    docs: Option<&PluginDocs>,
) -> Result<(Vec<Tool>, Skipped)> {
    struct Found {
        interface: Option<String>,
        function: String,
        ty: ComponentFunc,
        index: ComponentExportIndex,
    }
    let mut found = Vec::new();
    for (export, item) in component.component_type().exports(engine) {
        match item.ty {
            ComponentItem::ComponentFunc(ty) => {
                if let Some(index) = component.get_export_index(None, export) {
                    found.push(Found {
                        interface: None,
                        function: export.to_string(),
                        ty,
                        index,
                    });
                }
            }
            ComponentItem::ComponentInstance(instance) => {
                let Some(instance_index) = component.get_export_index(None, export) else {
                    continue;
                };
                for (function, item) in instance.exports(engine) {
                    let ComponentItem::ComponentFunc(ty) = item.ty else {
                        continue;
                    };
                    if let Some(index) = component.get_export_index(Some(&instance_index), function)
                    {
                        found.push(Found {
                            interface: Some(export.to_string()),
                            function: function.to_string(),
                            ty,
                            index,
                        });
                    }
                }
            }
            _ => {}
        }
    }

    if found.len() > MAX_TOOLS {
        bail!(
            "plugin \"{plugin}\" exports {} functions, more than the {MAX_TOOLS} tools a plugin \
             may have",
            found.len()
        );
    }
    let defaults: Vec<String> = found
        .iter()
        .map(|f| {
            let qualify = found
                .iter()
                .filter(|other| other.function == f.function)
                .count()
                > 1;
            tool_name(
                plugin,
                f.interface.as_deref().filter(|_| qualify),
                &f.function,
            )
        })
        .collect();
    let names = crate::naming::apply(plugin, rules, &defaults)?;

    let mut tools = Vec::new();
    let mut skipped = Vec::new();
    let mut plugin_nodes_left = MAX_PLUGIN_SCHEMA_NODES;
    for (f, name) in found.iter().zip(names) {
        let export = match &f.interface {
            Some(interface) => format!("{interface}#{}", f.function),
            None => f.function.clone(),
        };
        let Some(name) = name else {
            skipped.push((export, "moat.toml hides it".to_string()));
            continue;
        };
        if name.len() > MAX_TOOL_NAME {
            skipped.push((
                export,
                format!("its tool name `{name}` is longer than {MAX_TOOL_NAME} characters"),
            ));
            continue;
        }
        let function_docs = docs.and_then(|d| d.function(f.interface.as_deref(), &f.function));
        // A tool gets its own allowance, or what the plugin has left if that is less.
        let per_tool = MAX_TOOL_SCHEMA_NODES <= plugin_nodes_left;
        let mut budget = Budget::new(MAX_TOOL_SCHEMA_NODES.min(plugin_nodes_left));
        let described = describe_tool(
            name.clone(),
            export.clone(),
            plugin,
            &f.ty,
            f.index,
            function_docs,
            &mut budget,
        );
        plugin_nodes_left -= MAX_TOOL_SCHEMA_NODES.min(plugin_nodes_left) - budget.left();
        match described {
            Ok(tool) => tools.push(tool),
            Err(SchemaError::Unsupported(unsupported)) => {
                skipped.push((export, unsupported.to_string()))
            }
            Err(SchemaError::TooLarge) if per_tool => bail!(
                "plugin \"{plugin}\": the JSON Schemas of tool `{name}` ({export}) would have \
                 more than {MAX_TOOL_SCHEMA_NODES} nodes, the most one tool may have"
            ),
            Err(SchemaError::TooLarge) => bail!(
                "plugin \"{plugin}\": with tool `{name}` ({export}), the JSON Schemas of its \
                 tools would have more than {MAX_PLUGIN_SCHEMA_NODES} nodes, the most one plugin \
                 may have"
            ),
        }
    }
    tools.sort_by(|a, b| a.name.cmp(&b.name));
    Ok((tools, skipped))
}

fn describe_tool(
    name: String,
    export: String,
    plugin: &str,
    ty: &ComponentFunc,
    index: ComponentExportIndex,
    docs: Option<FunctionDocs<'_>>,
    budget: &mut Budget,
) -> Result<Tool, SchemaError> {
    let params: Vec<(String, Type)> = ty.params().map(|(n, t)| (n.to_string(), t)).collect();
    let results: Vec<Type> = ty.results().collect();
    let returns = Returns::of(results.first().cloned());
    let input = object_schema(
        params.iter().map(|(n, t)| (n.as_str(), t.clone())),
        |param| docs.map_or((None, None), |d| d.param(param)),
        budget,
    )?;
    let output = returns.output_schema(docs.and_then(|d| d.result()), budget)?;
    let description = docs
        .and_then(|d| d.description())
        .unwrap_or_else(|| format!("Calls `{export}` of the plugin \"{plugin}\"."));
    Ok(Tool {
        name,
        export,
        description,
        input_schema: Arc::new(into_object(input)),
        output_schema: output.map(|o| Arc::new(into_object(o))),
        params,
        returns,
        index,
    })
}

fn into_object(value: Value) -> JsonObject {
    match value {
        Value::Object(object) => object,
        _ => unreachable!("object schemas are objects"),
    }
}

/// The MCP name of a tool: `{plugin}_{function}`, or `{plugin}_{interface}_{function}` when two of
/// the plugin's exported functions share a name. Kebab-case becomes snake_case, and any character
/// outside `[A-Za-z0-9_-]` becomes `_`, so names suit every MCP host.
pub fn tool_name(plugin: &str, interface: Option<&str>, function: &str) -> String {
    let interface = interface.map(|i| {
        // `ns:pkg/name@1.0.0` → `name`
        let i = i.rsplit('/').next().unwrap_or(i);
        i.split('@').next().unwrap_or(i)
    });
    [Some(plugin), interface, Some(function)]
        .into_iter()
        .flatten()
        .map(sanitize)
        .collect::<Vec<_>>()
        .join("_")
}

/// A plugin or tool name part: `-` becomes `_`, anything outside `[A-Za-z0-9_]` becomes `_`.
pub fn sanitize(part: &str) -> String {
    part.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// Roughly how many bytes a value takes once it is JSON: enough to refuse a giant result before
/// it is copied again.
fn value_size(val: &Val) -> usize {
    match val {
        Val::String(s) => s.len() + 2,
        Val::List(items) | Val::Tuple(items) | Val::FixedLengthList(items) => {
            items.iter().map(value_size).sum::<usize>() + items.len() + 2
        }
        Val::Record(fields) => fields
            .iter()
            .map(|(name, v)| name.len() + 4 + value_size(v))
            .sum(),
        Val::Map(entries) => entries
            .iter()
            .map(|(k, v)| value_size(k) + value_size(v) + 2)
            .sum(),
        Val::Variant(name, payload) => name.len() + 20 + payload.as_deref().map_or(0, value_size),
        Val::Option(inner) => inner.as_deref().map_or(4, value_size),
        Val::Result(Ok(inner) | Err(inner)) => 8 + inner.as_deref().map_or(4, value_size),
        Val::Flags(names) => names.iter().map(|n| n.len() + 3).sum(),
        Val::Enum(name) => name.len() + 2,
        _ => 8,
    }
}

/// A trap's cause, without wasmtime's backtrace noise.
fn trap_message(error: &wasmtime::Error) -> String {
    if let Some(trap) = error.downcast_ref::<wasmtime::Trap>() {
        return trap.to_string();
    }
    // The outermost layer is often only the wasm backtrace; the cause (such as "forcing trap
    // when growing memory to …") sits deeper in the chain.
    let mut message = error
        .chain()
        .map(|cause| cause.to_string())
        .find(|text| !text.starts_with("error while executing at wasm backtrace"))
        .unwrap_or_else(|| error.to_string());
    if message.contains("maximum concurrent") {
        message.push_str(" (too many calls at once; try again)");
    }
    message
}

fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.trim_end().lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Reads a plugin file, with the path in the error.
pub fn read_wasm(path: &std::path::Path) -> Result<Vec<u8>> {
    let wasm = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    if !wasm.starts_with(b"\0asm") {
        bail!("{} is not a WebAssembly file", path.display());
    }
    Ok(wasm)
}
