//! The `moat` command: serve plugins over MCP, inspect them, or call one tool once.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use rmcp::ServiceExt;
use serde_json::{Value, json};

use moat::cache::Cache;
use moat::catalogue::Catalogue;
use moat::config;
use moat::hosts::{Host, Launch, snippet};
use moat::plugin::{Plugin, sanitize};
use moat::registry::{PluginSource, Registry};
use moat::reload::{Loader, Served};
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
    /// Serve plugins as MCP tools over stdio, or Streamable HTTP (logs go to stderr).
    Serve {
        /// Plugin files, or folders whose every `.wasm` file is a plugin.
        plugins: Vec<PathBuf>,
        /// A moat.toml naming plugins and their limits.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Serve Streamable HTTP at http://ADDRESS/mcp instead of stdio, e.g. 127.0.0.1:8080.
        #[arg(long, value_name = "ADDRESS")]
        http: Option<std::net::SocketAddr>,
        /// Tools per `tools/list` page.
        #[arg(long, value_name = "N", default_value_t = moat::catalogue::DEFAULT_PAGE_SIZE)]
        page_size: std::num::NonZeroUsize,
    },
    /// Show a plugin's tools, their schemas and descriptions, and what it imports.
    Inspect {
        plugin: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Print what an MCP host needs to start this moat with these arguments.
    Config {
        /// The host: claude-desktop, claude-code, cursor or vscode.
        host: Host,
        /// Plugin files, or folders whose every `.wasm` file is a plugin.
        plugins: Vec<PathBuf>,
        /// A moat.toml naming plugins and their limits.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Point the host at a moat serving Streamable HTTP at this address instead.
        #[arg(long, value_name = "ADDRESS")]
        http: Option<std::net::SocketAddr>,
        /// The server's name in the host's configuration.
        #[arg(long, default_value = "moat")]
        name: String,
    },
    /// Manage the cache of compiled plugins (`MOAT_CACHE_DIR`, else `~/.cache/moat`).
    Cache {
        #[command(subcommand)]
        action: CacheAction,
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

#[derive(Subcommand)]
enum CacheAction {
    /// Delete every compiled plugin in the cache.
    Clear,
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
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
        Command::Serve {
            plugins,
            config,
            http,
            page_size,
        } => {
            serve(
                Served {
                    paths: plugins,
                    config,
                },
                http,
                page_size,
            )
            .await
        }
        Command::Inspect { plugin, json } => inspect(plugin, json),
        Command::Call {
            plugin,
            tool,
            arguments,
        } => call(plugin, tool, arguments).await,
        Command::Config {
            host,
            plugins,
            config,
            http,
            name,
        } => {
            let launch = match http {
                Some(addr) => Launch::Http {
                    url: format!("http://{addr}/mcp"),
                },
                None => Launch::stdio(
                    std::env::current_exe()?,
                    &plugins,
                    config.as_deref(),
                    &std::env::current_dir()?,
                ),
            };
            print_out(&snippet(host, &name, &launch)?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Cache {
            action: CacheAction::Clear,
        } => {
            let dir = Cache::default_dir().context("no cache folder: set MOAT_CACHE_DIR")?;
            let removed = Cache::clear(&dir)?;
            eprintln!("moat: removed {removed} files from {}", dir.display());
            Ok(ExitCode::SUCCESS)
        }
    }
}

async fn serve(
    served: Served,
    http: Option<std::net::SocketAddr>,
    page_size: std::num::NonZeroUsize,
) -> Result<ExitCode> {
    let sources = served.sources()?;
    let mut loader = Loader::new(moat::engine::new_engine()?, open_cache());
    let outcome = tokio::task::block_in_place(|| loader.load(&sources))?;
    outcome.log();
    let registry = Arc::new(outcome.registry);
    let catalogue = Catalogue::new(registry, page_size);
    // From now on, a change of what is served (or SIGHUP) reloads it.
    moat::reload::spawn(served, loader, catalogue.clone(), &sources)?;
    if let Some(addr) = http {
        let shutdown = tokio_util::sync::CancellationToken::new();
        let on_signal = shutdown.clone();
        tokio::spawn(async move {
            let _ = tokio::signal::ctrl_c().await;
            on_signal.cancel();
        });
        moat::http::serve(catalogue, addr, shutdown).await?;
        return Ok(ExitCode::SUCCESS);
    }
    tracing::info!("serving MCP on stdio");
    let service = MoatServer::new(catalogue)
        .serve(rmcp::transport::stdio())
        .await
        .context("starting the MCP session")?;
    service.waiting().await?;
    Ok(ExitCode::SUCCESS)
}

/// The compiled-plugin cache, or none (with a warning) when it cannot be used.
fn open_cache() -> Option<Cache> {
    let dir = Cache::default_dir()?;
    Cache::open(&dir)
        .inspect_err(|e| tracing::warn!("compiling without a cache: {e:#}"))
        .ok()
}

/// Loads one plugin file for `inspect` and `call`.
fn load_one(path: PathBuf) -> Result<Arc<Plugin>> {
    let engine = moat::engine::new_engine()?;
    let mut sources = config::sources_from_paths(&[path])?;
    let source: PluginSource = sources.pop().context("no plugin found")?;
    let cache = open_cache();
    let (registry, mut errors) = Registry::load_cached(&engine, &[source], cache.as_ref())?;
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
        print_out(&serde_json::to_string_pretty(&report)?);
        return Ok(ExitCode::SUCCESS);
    }
    let mut out = String::new();
    macro_rules! line {
        ($($arg:tt)*) => {{
            out.push_str(&format!($($arg)*));
            out.push('\n');
        }};
    }
    line!("plugin {}", plugin.name);
    if let Some(summary) = &plugin.summary {
        line!("  {}", summary.trim().replace('\n', "\n  "));
    }
    line!("\nimports:");
    if plugin.imports.is_empty() {
        line!("  (none)");
    }
    for import in &plugin.imports {
        line!("  {import}");
    }
    for note in &ungranted {
        line!("  note: {note}");
    }
    line!("\ntools:");
    for tool in &plugin.tools {
        line!("  {}  ({})", tool.name, tool.export);
        line!("    {}", tool.description.replace('\n', "\n    "));
        let input = serde_json::to_string_pretty(&*tool.input_schema)?;
        line!("    input schema: {}", input.replace('\n', "\n    "));
        if let Some(output) = &tool.output_schema {
            let output = serde_json::to_string_pretty(&**output)?;
            line!("    output schema: {}", output.replace('\n', "\n    "));
        }
    }
    for (export, reason) in &plugin.skipped {
        line!("  (not a tool: {export}: {reason})");
    }
    print_out(out.trim_end());
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
        .find(|t| {
            let function = t.export.rsplit('#').next().unwrap_or_default();
            t.name == tool_name || function == tool_name || sanitize(function) == tool_name
        })
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
    print_out(&serde_json::to_string_pretty(&result)?);
    Ok(if result.is_error == Some(true) {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// Prints a command's output; a reader that went away (`moat inspect … | head`) is not an error.
fn print_out(text: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stdout().lock(), "{text}");
}
