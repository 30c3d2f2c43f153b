//! A plugin that is an MCP server (it exports `moat:plugin/mcp-server`: what `moat build` makes
//! of a server written with the TypeScript SDK). moat is its client: every instance is given
//! the handshake as it is made, ahead of the call that takes it (see [`WarmUp`]); at load one
//! instance lists what the server offers, which becomes the plugin's tools and prompts; every
//! call is one request, in a fresh instance, after moat checked its arguments against the
//! tool's schema (or the prompt's arguments).

use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use rmcp::model::{CallToolResult, ContentBlock, JsonObject};
use serde_json::{Value, json};
use wasmtime::component::{Component, ComponentExportIndex, Val};

use super::discover::Discovered;
use super::prompts::{Got, Prompt};
use super::{
    CallError, Exchange, Export, MAX_PLUGIN_SCHEMA_NODES, MAX_TOOL_SCHEMA_NODES, MAX_TOOLS, Plugin,
    Runs, Tool,
};
use crate::sandbox::instances::{Fresh, Instances, MakeError, WarmUp};
use crate::sandbox::network::Denials;
use crate::wit::constraints::Check;
use crate::wit::naming::{MAX_TOOL_NAME, ToolRules, tool_name};

/// The interface an MCP server component exports.
pub(super) const INTERFACE: &str = "moat:plugin/mcp-server@0.1.0";

/// The protocol moat speaks to the servers it runs, whatever its own clients speak.
const PROTOCOL: &str = "2025-11-25";

/// The most pages of one list moat reads from a server.
const MAX_PAGES: usize = 100;

/// The `handle` function of a component that exports [`INTERFACE`]: an MCP server.
pub(super) fn handle(component: &Component) -> Option<ComponentExportIndex> {
    let instance = component.get_export_index(None, INTERFACE)?;
    component.get_export_index(Some(&instance), "handle")
}

/// The handshake every instance of a server gets before a call takes it. moat declares every
/// client capability to the server: whether the caller has one is decided when the server asks
/// (see `crate::sandbox::mcp_client`), as for every plugin.
pub(super) fn handshake(handle: ComponentExportIndex) -> WarmUp {
    let initialize = json!({
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": PROTOCOL,
            "capabilities": {
                "elicitation": {"form": {}, "url": {}},
                "sampling": {},
                "roots": {},
            },
            "clientInfo": {"name": "moat", "version": env!("CARGO_PKG_VERSION")},
        },
    });
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    WarmUp {
        export: handle,
        messages: vec![initialize.to_string(), initialized.to_string()],
    }
}

/// What a server offers, read from one instance when the plugin loads: its tools (named as
/// `rules` say) and its instructions, the plugin's summary.
pub(super) fn discover(
    instances: &Instances,
    handle: ComponentExportIndex,
    plugin: &str,
    rules: &ToolRules,
    deadline: std::time::Duration,
) -> Result<(Discovered, Option<String>)> {
    // Loads run on plain threads: the instance gets a runtime of its own for its few requests.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let listed = runtime.block_on(async {
        let deadline = Instant::now() + deadline;
        let fresh = match instances.take(deadline, true).await {
            Ok(fresh) => fresh,
            Err(MakeError::Setup(why)) => bail!("plugin \"{plugin}\" cannot start: {why}"),
            Err(MakeError::Instantiate { error, stderr }) => bail!(
                "plugin \"{plugin}\": its server did not start: {error:#}{}",
                if stderr.is_empty() {
                    String::new()
                } else {
                    format!("\nits output:\n{stderr}")
                }
            ),
        };
        tokio::time::timeout_at(deadline.into(), list(fresh, handle))
            .await
            .unwrap_or_else(|_| bail!("its lists took longer than the plugin's deadline"))
            .with_context(|| format!("plugin \"{plugin}\": its server did not list its tools"))
    })?;
    let mut discovered = describe(plugin, rules, listed.tools)?;
    discovered.prompts = listed
        .prompts
        .into_iter()
        .map(|prompt| Prompt::served(plugin, prompt))
        .collect();
    discovered.prompts.sort_by(|a, b| a.name.cmp(&b.name));
    Ok((discovered, listed.instructions))
}

/// What a server said when moat listed what it offers.
struct Listed {
    instructions: Option<String>,
    tools: Vec<rmcp::model::Tool>,
    prompts: Vec<rmcp::model::Prompt>,
}

/// The server's answer to `initialize`, and its whole tool and prompt lists, from `fresh`.
async fn list(mut fresh: Fresh, handle: ComponentExportIndex) -> Result<Listed> {
    let initialized: Value = match fresh.warmed.first() {
        Some(answer) => result(answer).context("its answer to `initialize`")?,
        None => bail!("it was not given the handshake"),
    };
    let func = fresh
        .instance
        .get_func(&mut fresh.store, fresh.code.export(handle))
        .context("its `handle` is missing")?;
    let mut server = Lister {
        func,
        store: &mut fresh.store,
        id: 0,
    };
    let tools = server.all("tools/list", "tools").await?;
    let offers = |what: &str| initialized["capabilities"].get(what).is_some();
    let prompts = if offers("prompts") {
        server.all("prompts/list", "prompts").await?
    } else {
        Vec::new()
    };
    let instructions = initialized["instructions"].as_str().map(str::to_string);
    Ok(Listed {
        instructions,
        tools,
        prompts,
    })
}

/// Reads a server's lists, page by page, through its `handle`.
struct Lister<'a> {
    func: wasmtime::component::Func,
    store: &'a mut wasmtime::Store<crate::sandbox::host::HostState>,
    id: u64,
}

impl Lister<'_> {
    /// Every item of the list `method` answers, under `key`, its pages followed.
    async fn all<T: serde::de::DeserializeOwned>(
        &mut self,
        method: &str,
        key: &str,
    ) -> Result<Vec<T>> {
        let mut items = Vec::new();
        let mut cursor: Option<String> = None;
        for page in 1.. {
            if page > MAX_PAGES {
                bail!("its answer to `{method}` has more than {MAX_PAGES} pages");
            }
            self.id += 1;
            let mut request = json!({"jsonrpc": "2.0", "id": self.id, "method": method});
            if let Some(cursor) = cursor.take() {
                request["params"] = json!({ "cursor": cursor });
            }
            let mut results = [Val::Bool(false)];
            self.func
                .call_async(
                    &mut *self.store,
                    &[Val::String(request.to_string())],
                    &mut results,
                )
                .await?;
            let [Val::String(answer)] = results else {
                bail!("its `handle` returned no string");
            };
            let mut page = result(&answer).with_context(|| format!("its answer to `{method}`"))?;
            let listed: Vec<T> = serde_json::from_value(page[key].take())
                .with_context(|| format!("its answer to `{method}` holds no list of {key}"))?;
            items.extend(listed);
            if items.len() > MAX_TOOLS {
                bail!("it lists more than the {MAX_TOOLS} {key} a plugin may have");
            }
            match page["nextCursor"].as_str() {
                Some(next) => cursor = Some(next.to_string()),
                None => break,
            }
        }
        Ok(items)
    }
}

/// The JSON-RPC response `handle` returned for a request.
fn answer(results: &[Val]) -> Result<Value, CallError> {
    let [Val::String(answer)] = results else {
        return Err(CallError::BadResult(
            "its `handle` returned no string".into(),
        ));
    };
    if answer.is_empty() {
        return Err(CallError::BadResult(
            "the server gave no answer: its handler never finished".into(),
        ));
    }
    serde_json::from_str(answer)
        .map_err(|e| CallError::BadResult(format!("its answer is not JSON: {e}")))
}

/// A trap of the JavaScript engine, told the way its author reads it: componentize-js stops
/// with an `unreachable` when the handler's promise is pending and nothing is left to run.
fn explain_trap(error: CallError) -> CallError {
    const NOTHING_PENDING: &str = "event loop error, but no exception is pending";
    match error {
        CallError::Trap { stderr, .. } if stderr.contains(NOTHING_PENDING) => CallError::Trap {
            message: "the handler's promise never settled, and nothing was left for it to wait \
                      on (no timer, no request)"
                .into(),
            stderr,
        },
        other => other,
    }
}

/// The `result` of a JSON-RPC response, or its `error` as an error.
fn result(answer: &str) -> Result<Value> {
    let mut response: Value =
        serde_json::from_str(answer).with_context(|| format!("it is not JSON: {answer:.200}"))?;
    if let Some(error) = response.get("error") {
        bail!("it is an error: {}", error_text(error));
    }
    match response.get_mut("result") {
        Some(result) => Ok(result.take()),
        None => bail!("it holds neither a result nor an error: {answer:.200}"),
    }
}

/// A JSON-RPC error, as a person reads it.
fn error_text(error: &Value) -> String {
    let message = error["message"].as_str().unwrap_or("no message");
    match error["code"].as_i64() {
        Some(code) => format!("{message} ({code})"),
        None => message.to_string(),
    }
}

/// The server's tools as the plugin's: named `{plugin}_{name}` unless `rules` rename or hide
/// them, each with a check of its input schema. A tool whose schema cannot be checked is not
/// offered; schemas too large refuse the plugin, as for WIT tools.
fn describe(plugin: &str, rules: &ToolRules, listed: Vec<rmcp::model::Tool>) -> Result<Discovered> {
    let defaults: Vec<String> = listed
        .iter()
        .map(|tool| tool_name(plugin, None, &tool.name))
        .collect();
    let names = crate::wit::naming::apply(plugin, rules, &defaults)?;
    let mut discovered = Discovered::default();
    let mut nodes_left = MAX_PLUGIN_SCHEMA_NODES;
    for (tool, name) in listed.into_iter().zip(names) {
        let export = tool.name.to_string();
        let Some(name) = name else {
            discovered
                .skipped
                .push((export, "moat.toml hides it".to_string()));
            continue;
        };
        if name.len() > MAX_TOOL_NAME {
            let why = format!("its tool name `{name}` is longer than {MAX_TOOL_NAME} characters");
            discovered.skipped.push((export, why));
            continue;
        }
        let nodes = nodes(&Value::Object((*tool.input_schema).clone()))
            + tool
                .output_schema
                .as_ref()
                .map_or(0, |o| nodes(&Value::Object((**o).clone())));
        if nodes > MAX_TOOL_SCHEMA_NODES || nodes > nodes_left {
            bail!(
                "plugin \"{plugin}\": the JSON Schemas of tool `{export}` would take its tools \
                 past {MAX_TOOL_SCHEMA_NODES} nodes for one tool or {MAX_PLUGIN_SCHEMA_NODES} \
                 for the plugin"
            );
        }
        nodes_left -= nodes;
        let check = match Check::new(&tool.input_schema) {
            Ok(check) => Arc::new(check),
            Err(why) => {
                discovered.skipped.push((export, why));
                continue;
            }
        };
        let description = tool.description.as_deref().map(str::to_string);
        discovered.tools.push(Tool {
            name,
            description: description.clone().unwrap_or_else(|| {
                format!("Calls the tool `{export}` of the server \"{plugin}\".")
            }),
            documented: description.is_some(),
            title: tool.title,
            annotations: tool.annotations,
            task_required: false,
            input_schema: tool.input_schema,
            output_schema: tool.output_schema,
            runs: Runs::Served {
                name: export.clone(),
                check,
            },
            export,
        });
    }
    discovered.tools.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(discovered)
}

/// How many values a JSON document holds: what a schema's size is counted in.
fn nodes(value: &Value) -> usize {
    1 + match value {
        Value::Array(items) => items.iter().map(nodes).sum(),
        Value::Object(members) => members.values().map(nodes).sum(),
        _ => 0,
    }
}

impl Plugin {
    /// Gets the server's prompt `prompt` with the client's `arguments`, in a fresh instance,
    /// once moat checked that each is a string and none required is missing.
    pub(super) async fn get_served_prompt(
        &self,
        prompt: &Prompt,
        arguments: Option<&JsonObject>,
        exchange: Exchange,
    ) -> Result<Got, CallError> {
        let arguments = arguments.cloned().unwrap_or_default();
        prompt
            .check_served(&arguments)
            .map_err(CallError::InvalidArguments)?;
        let params = json!({"name": prompt.function, "arguments": arguments});
        let answered = self
            .ask_server(
                &prompt.name,
                "prompts/get",
                params,
                exchange,
                &mut Denials::default(),
            )
            .await?;
        let result = match answered {
            Ok(result) => result,
            Err(error) => return Ok(Got::Refused(error)),
        };
        let got: rmcp::model::GetPromptResult = serde_json::from_value(result)
            .map_err(|e| CallError::BadResult(format!("its answer is not a prompt: {e}")))?;
        Ok(Got::Messages(got.messages))
    }

    /// Sends the server one request, `method` with `params`, in a fresh instance (its log lines
    /// under `name`): its `result`, or its JSON-RPC `error` as a person reads it.
    async fn ask_server(
        &self,
        name: &str,
        method: &str,
        params: Value,
        exchange: Exchange,
        denials: &mut Denials,
    ) -> Result<Result<Value, String>, CallError> {
        let request = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let export = Export {
            name,
            index: self
                .server
                .expect("only a server's tools and prompts are served"),
        };
        let results = self
            .invoke(
                export,
                &[Val::String(request.to_string())],
                exchange,
                denials,
            )
            .await
            .map_err(explain_trap)?;
        let mut response = answer(&results)?;
        Ok(match response.get("error") {
            Some(error) => Err(error_text(error)),
            None => Ok(response["result"].take()),
        })
    }

    /// Calls the server's tool `name` (offered as `tool`) with `args`, checked against its
    /// input schema first, in a fresh instance.
    pub(super) async fn call_served(
        &self,
        tool: &str,
        name: &str,
        check: &Check,
        args: Option<&JsonObject>,
        exchange: Exchange,
        denials: &mut Denials,
    ) -> Result<CallToolResult, CallError> {
        let arguments = Value::Object(args.cloned().unwrap_or_default());
        check
            .check(&arguments)
            .map_err(CallError::InvalidArguments)?;
        // The server reports progress only for a request that asks for it; moat passes its
        // reports on to a caller that asked.
        let params = json!({"name": name, "arguments": arguments, "_meta": {"progressToken": 1}});
        let result = match self
            .ask_server(tool, "tools/call", params, exchange, denials)
            .await?
        {
            Ok(result) => result,
            Err(error) => {
                let text = format!("the server refused the call: {error}");
                return Ok(CallToolResult::error(vec![ContentBlock::text(text)]));
            }
        };
        let mut result: CallToolResult = serde_json::from_value(result)
            .map_err(|e| CallError::BadResult(format!("its answer is not a tool's result: {e}")))?;
        // The server speaks 2025-11-25, whose results carry no `resultType`; moat answers its
        // own caller in the caller's era, which drops the field again for a legacy one.
        result.result_type = Some(rmcp::model::ResultType::COMPLETE);
        Ok(result)
    }
}
