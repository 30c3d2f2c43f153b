//! `moat call`: one call of one tool, or the list of a plugin's tools. Every outcome is an MCP
//! result on stdout and an exit code that says what kind of outcome it was.

use std::io::Read;
use std::path::Path;
use std::process::ExitCode;

use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::Value;

use moat::plugin::{CallError, Plugin, Tool};
use moat::supply::policy::Policy;
use moat::wit::naming::sanitize;
use moat::wit::prose;

use super::load::{load_configured, load_one};
use super::print_out;

/// The exit codes, for `moat call --help`.
pub const EXIT_CODES: &str = "\
Exit codes (once the command line is read, every failure also prints an MCP result with
isError on stdout; clap's own usage errors print only their message on stderr):
  0  the tool succeeded (or, with no TOOL, the tools were listed)
  1  the tool reported an error (isError: true)
  2  usage: a bad command line, arguments that are not a JSON object or do not fit the tool's
     parameters, or no such tool
  3  the plugin could not be loaded: missing or unreachable, not a component, refused by the
     lock or the policy, or not in the config
  4  the call failed: the tool crashed, ran past its deadline or out of fuel, or returned
     something moat cannot hand on";

/// What kind of failure ended a `moat call`; its exit code.
#[derive(Clone, Copy)]
enum Failure {
    Usage = 2,
    Load = 3,
    Call = 4,
}

/// Runs `moat call`; never an error of its own: every failure is reported as a result.
pub async fn call(
    source: &str,
    tool: Option<String>,
    arguments: Option<String>,
    config: Option<&Path>,
) -> ExitCode {
    match try_call(source, tool, arguments, config).await {
        Ok(code) => code,
        Err((failure, message)) => {
            let result = CallToolResult::error(vec![ContentBlock::text(message.clone())]);
            print_json(&result);
            eprintln!("moat: {message}");
            ExitCode::from(failure as u8)
        }
    }
}

async fn try_call(
    source: &str,
    tool: Option<String>,
    arguments: Option<String>,
    config: Option<&Path>,
) -> Result<ExitCode, (Failure, String)> {
    let usage = |message: String| (Failure::Usage, message);
    // The arguments are checked before anything is fetched or compiled.
    let arguments = match arguments.as_deref() {
        None => serde_json::Map::new(),
        Some(text) => parse_arguments(&read_arguments(text).map_err(usage)?).map_err(usage)?,
    };
    let policy = Policy::resolve(None).map_err(|e| (Failure::Load, format!("{e:#}")))?;
    let loaded = match config {
        Some(config) => load_configured(config, source, &policy).await,
        None => load_one(source, &policy).await,
    };
    let (plugin, _) = loaded.map_err(|e| (Failure::Load, format!("{e:#}")))?;
    let Some(tool_name) = tool else {
        print_out(&tool_list(&plugin));
        return Ok(ExitCode::SUCCESS);
    };
    let tool = find_tool(&plugin, &tool_name).map_err(usage)?;
    match plugin.call(tool, Some(&arguments), None).await {
        Ok(result) => {
            print_json(&result);
            Ok(if result.is_error == Some(true) {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            })
        }
        Err(error @ CallError::InvalidArguments(_)) => Err(usage(error.to_string())),
        Err(error) => Err((Failure::Call, error.to_string())),
    }
}

/// The arguments' text: as given, or stdin's for `-`.
fn read_arguments(text: &str) -> Result<String, String> {
    if text != "-" {
        return Ok(text.to_string());
    }
    let mut read = String::new();
    std::io::stdin()
        .read_to_string(&mut read)
        .map_err(|e| format!("reading the arguments from stdin: {e}"))?;
    Ok(read)
}

fn parse_arguments(text: &str) -> Result<serde_json::Map<String, Value>, String> {
    match serde_json::from_str(text) {
        Ok(Value::Object(arguments)) => Ok(arguments),
        Ok(_) => Err("the arguments must be a JSON object, like '{\"message\": \"hi\"}'".into()),
        Err(error) => Err(format!("the arguments are not valid JSON: {error}")),
    }
}

/// The tool named by its MCP name, its function's name, or that name as moat spells it.
fn find_tool<'p>(plugin: &'p Plugin, name: &str) -> Result<&'p Tool, String> {
    plugin
        .tools
        .iter()
        .find(|t| {
            let function = t.export.rsplit('#').next().unwrap_or_default();
            t.name == name || function == name || sanitize(function) == name
        })
        .ok_or_else(|| {
            let names: Vec<&str> = plugin.tools.iter().map(|t| t.name.as_str()).collect();
            format!("no tool \"{name}\"; the plugin has: {}", names.join(", "))
        })
}

/// How wide a line of the tool list may be, name and description together.
const LIST_WIDTH: usize = 100;
/// The least room a description gets, however long the names.
const MIN_ABOUT_WIDTH: usize = 40;

/// One line per tool: its name and the start of its description (see [`prose::headline`]).
fn tool_list(plugin: &Plugin) -> String {
    let width = plugin.tools.iter().map(|t| t.name.len()).max().unwrap_or(0);
    let about_width = LIST_WIDTH.saturating_sub(width + 2).max(MIN_ABOUT_WIDTH);
    plugin
        .tools
        .iter()
        .map(|tool| {
            let about = prose::headline(&tool.description, about_width);
            format!("{:width$}  {about}", tool.name)
                .trim_end()
                .to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn print_json(result: &CallToolResult) {
    match serde_json::to_string_pretty(result) {
        Ok(json) => print_out(&json),
        Err(error) => eprintln!("moat: the result is not JSON: {error}"),
    }
}
