//! The `moat` command: serve plugins over MCP, inspect them, or call one tool once.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use rmcp::ServiceExt;
use serde_json::{Value, json};

use moat::config;
use moat::plugin::Plugin;
use moat::registry::{PluginSource, Registry};
use moat::server::MoatServer;

/// Runs untrusted MCP tools as sandboxed WebAssembly components.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve plugins as MCP tools over stdio (logs go to stderr).
    Serve {
        /// Plugin files, or folders whose every `.wasm` file is a plugin.
        plugins: Vec<PathBuf>,
        /// A moat.toml naming plugins and their limits.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Show a plugin's tools, their schemas and descriptions, and what it imports.
    Inspect {
        plugin: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Call one tool once and print the MCP result as JSON.
    Call {
        plugin: PathBuf,
        /// The tool's MCP name, or the plain name of the exported function.
        tool: String,
        /// The arguments, as a JSON object.
        #[arg(default_value = "{}")]
        arguments: String,
    },
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("MOAT_LOG")
                .unwrap_or_else(|_| "info".into()),
        )
        .init();
    let runtime = tokio::runtime::Runtime::new().expect("starting the async runtime");
    match runtime.block_on(run(Cli::parse())) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("moat: {error:#}");
            ExitCode::from(2)
        }
    }
}

async fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Serve { plugins, config } => serve(plugins, config).await,
        Command::Inspect { plugin, json } => inspect(plugin, json),
        Command::Call {
            plugin,
            tool,
            arguments,
        } => call(plugin, tool, arguments).await,
    }
}

async fn serve(paths: Vec<PathBuf>, config_path: Option<PathBuf>) -> Result<ExitCode> {
    let mut sources = config::sources_from_paths(&paths)?;
    if let Some(path) = config_path {
        sources.extend(config::read(&path)?);
    }
    let mut names = std::collections::HashSet::new();
    if let Some(dup) = sources.iter().find(|s| !names.insert(s.name.clone())) {
        bail!(
            "two plugins are named \"{}\"; give one another name in moat.toml",
            dup.name
        );
    }
    let engine = moat::engine::new_engine()?;
    let (registry, errors) = Registry::load(&engine, &sources)?;
    for error in &errors {
        tracing::error!(plugin = error.plugin, "not loaded: {:#}", error.error);
    }
    tracing::info!(
        plugins = registry.plugins().len(),
        tools = registry.tools().count(),
        "serving MCP on stdio"
    );
    let service = MoatServer::new(Arc::new(registry))
        .serve(rmcp::transport::stdio())
        .await
        .context("starting the MCP session")?;
    service.waiting().await?;
    Ok(ExitCode::SUCCESS)
}

/// Loads one plugin file for `inspect` and `call`.
fn load_one(path: PathBuf) -> Result<Arc<Plugin>> {
    let engine = moat::engine::new_engine()?;
    let mut sources = config::sources_from_paths(&[path])?;
    let source: PluginSource = sources.pop().context("no plugin found")?;
    let (registry, mut errors) = Registry::load(&engine, &[source])?;
    if let Some(error) = errors.pop() {
        return Err(error.error);
    }
    Ok(registry.plugins()[0].clone())
}

fn inspect(path: PathBuf, as_json: bool) -> Result<ExitCode> {
    let plugin = load_one(path)?;
    let tools: Vec<Value> = plugin
        .tools
        .iter()
        .map(|tool| {
            json!({
                "name": tool.name,
                "export": tool.export,
                "description": tool.description,
                "inputSchema": *tool.input_schema,
                "outputSchema": tool.output_schema.as_deref(),
            })
        })
        .collect();
    let skipped: Vec<Value> = plugin
        .skipped
        .iter()
        .map(|(export, reason)| json!({"export": export, "reason": reason}))
        .collect();
    let ungranted = moat::grants::ungranted(&plugin.imports, &plugin.grants);
    if as_json {
        let report = json!({
            "plugin": &*plugin.name,
            "summary": plugin.summary,
            "imports": plugin.imports,
            "ungranted": ungranted,
            "tools": tools,
            "skipped": skipped,
        });
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("plugin {}", plugin.name);
    if let Some(summary) = &plugin.summary {
        println!("  {}", summary.trim().replace('\n', "\n  "));
    }
    println!("\nimports:");
    if plugin.imports.is_empty() {
        println!("  (none)");
    }
    for import in &plugin.imports {
        println!("  {import}");
    }
    for note in &ungranted {
        println!("  note: {note}");
    }
    println!("\ntools:");
    for tool in &plugin.tools {
        println!("  {}  ({})", tool.name, tool.export);
        println!("    {}", tool.description.replace('\n', "\n    "));
        let input = serde_json::to_string_pretty(&*tool.input_schema)?;
        println!("    input schema: {}", input.replace('\n', "\n    "));
        if let Some(output) = &tool.output_schema {
            let output = serde_json::to_string_pretty(&**output)?;
            println!("    output schema: {}", output.replace('\n', "\n    "));
        }
    }
    for (export, reason) in &plugin.skipped {
        println!("  (not a tool: {export}: {reason})");
    }
    Ok(ExitCode::SUCCESS)
}

async fn call(path: PathBuf, tool_name: String, arguments: String) -> Result<ExitCode> {
    let arguments: Value =
        serde_json::from_str(&arguments).context("the arguments are not valid JSON")?;
    let Value::Object(arguments) = arguments else {
        bail!("the arguments must be a JSON object");
    };
    let plugin = load_one(path)?;
    let tool = plugin
        .tools
        .iter()
        .find(|t| t.name == tool_name || t.export.rsplit('#').next() == Some(tool_name.as_str()))
        .with_context(|| {
            let names: Vec<&str> = plugin.tools.iter().map(|t| t.name.as_str()).collect();
            format!(
                "no tool \"{tool_name}\"; the plugin has: {}",
                names.join(", ")
            )
        })?;
    let result = match plugin.call(tool, Some(&arguments), None).await {
        Ok(result) => result,
        Err(error) => {
            eprintln!("moat: {error}");
            return Ok(ExitCode::from(1));
        }
    };
    println!("{}", serde_json::to_string_pretty(&result)?);
    Ok(if result.is_error == Some(true) {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
