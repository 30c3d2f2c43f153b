//! The `moat` command: serve plugins over MCP, inspect them, or call one tool once.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use rmcp::ServiceExt;
use serde_json::{Value, json};

use moat::cache::Cache;
use moat::config;
use moat::hosts::{Host, Launch, snippet};
use moat::lock::Lock;
use moat::plugin::{Plugin, read_wasm, sanitize};
use moat::registry::{LoadError, PluginSource, Registry};
use moat::server::MoatServer;
use moat::source::{Fetched, Fetcher, Progress, Source, Store};

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
        /// Plugins: files, folders (every `.wasm` file in them), https:// URLs, oci:// references.
        plugins: Vec<String>,
        /// A moat.toml naming plugins and their limits.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Serve Streamable HTTP at http://ADDRESS/mcp instead of stdio, e.g. 127.0.0.1:8080.
        #[arg(long, value_name = "ADDRESS")]
        http: Option<std::net::SocketAddr>,
    },
    /// Show a plugin's tools, their schemas and descriptions, and what it imports.
    Inspect {
        /// A file, an https:// URL or an oci:// reference.
        plugin: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Print what an MCP host needs to start this moat with these arguments.
    Config {
        /// The host: claude-desktop, claude-code, cursor or vscode.
        host: Host,
        /// Plugins: files, folders, https:// URLs, oci:// references.
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
    /// Fetch a plugin into the download cache and print its sha256.
    Pull {
        /// A file, a folder, an https:// URL or an oci:// reference.
        source: String,
    },
    /// Publish a component to an OCI registry as a Wasm artifact.
    Push {
        /// The component file.
        file: PathBuf,
        /// Where to: oci://host[:port]/repository:tag.
        reference: String,
    },
    /// Pin every plugin of a moat.toml to its current sha256 in the lock file beside it, and
    /// show what changed since the last lock.
    Lock {
        /// The moat.toml whose plugins to pin; the lock is the same path with `.lock`.
        #[arg(long, default_value = "moat.toml")]
        config: PathBuf,
    },
    /// Manage the cache of compiled plugins (`MOAT_CACHE_DIR`, else `~/.cache/moat`).
    Cache {
        #[command(subcommand)]
        action: CacheAction,
    },
    /// Call one tool once and print the MCP result as JSON.
    Call {
        /// A file, an https:// URL or an oci:// reference.
        plugin: String,
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
        } => serve(plugins, config, http).await,
        Command::Inspect { plugin, json } => inspect(&plugin, json).await,
        Command::Pull { source } => pull(&source).await,
        Command::Push { file, reference } => push(&file, &reference).await,
        Command::Lock { config } => lock(&config).await,
        Command::Call {
            plugin,
            tool,
            arguments,
        } => call(&plugin, tool, arguments).await,
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
            if let Some(store) = Store::default_dir().filter(|d| d.exists()) {
                std::fs::remove_dir_all(&store)
                    .with_context(|| format!("removing {}", store.display()))?;
                eprintln!("moat: removed the downloads in {}", store.display());
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

async fn serve(
    args: Vec<String>,
    config_path: Option<PathBuf>,
    http: Option<std::net::SocketAddr>,
) -> Result<ExitCode> {
    let mut sources = config::sources_from_args(&args)?;
    let configured = sources.len();
    let mut lock = None;
    if let Some(path) = &config_path {
        sources.extend(config::read(path)?);
        let lock_path = Lock::path_for(path);
        lock = Lock::read(&lock_path)?;
        if lock.is_none() {
            tracing::info!(
                "no {}: the plugins of {} are not pinned (`moat lock` pins them)",
                lock_path.display(),
                path.display()
            );
        }
    }
    let mut names = std::collections::HashSet::new();
    if let Some(dup) = sources.iter().find(|s| !names.insert(s.name.clone())) {
        bail!(
            "two plugins are named \"{}\"; give one another name in moat.toml",
            dup.name
        );
    }
    let fetcher = Fetcher::from_env()?;
    let mut fetched = fetch_all(&fetcher, &sources).await;
    if let (Some(lock), Some(path)) = (&lock, &config_path) {
        // Only moat.toml's plugins are pinned; those named on the command line are not in it.
        let base = path.parent().unwrap_or(Path::new(""));
        lock.enforce(base, &sources[configured..], &mut fetched[configured..]);
    }
    let engine = moat::engine::new_engine()?;
    let (registry, errors) = load(&engine, &sources, fetched, fetcher.progress())?;
    for error in &errors {
        tracing::error!(plugin = error.plugin, "not loaded: {:#}", error.error);
    }
    tracing::info!(
        plugins = registry.plugins().len(),
        tools = registry.tools().count(),
        "plugins loaded"
    );
    let registry = Arc::new(registry);
    if let Some(addr) = http {
        let shutdown = tokio_util::sync::CancellationToken::new();
        let on_signal = shutdown.clone();
        tokio::spawn(async move {
            let _ = tokio::signal::ctrl_c().await;
            on_signal.cancel();
        });
        moat::http::serve(registry, addr, shutdown).await?;
        return Ok(ExitCode::SUCCESS);
    }
    tracing::info!("serving MCP on stdio");
    let service = MoatServer::new(registry)
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

/// Fetches every source at once (downloads run side by side), in order.
async fn fetch_all(fetcher: &Fetcher, sources: &[PluginSource]) -> Vec<Result<Fetched>> {
    futures_util::future::join_all(sources.iter().map(|s| fetcher.fetch(&s.source))).await
}

/// Compiles the fetched plugins (from the compiled-plugin cache when it has them), with a
/// spinner on a terminal.
fn load(
    engine: &wasmtime::Engine,
    sources: &[PluginSource],
    fetched: Vec<Result<Fetched>>,
    progress: &Progress,
) -> Result<(Registry, Vec<LoadError>)> {
    let cache = open_cache();
    let spinner = progress.spinner(&format!("compiling {} plugins", sources.len()));
    let loaded = Registry::load_fetched(engine, sources, fetched, cache.as_ref());
    spinner.finish_and_clear();
    loaded
}

/// Loads the one plugin a source names, for `inspect` and `call`, with where it came from.
async fn load_one(text: &str) -> Result<(Arc<Plugin>, String)> {
    let mut sources = config::sources_from_args(&[text.to_string()])?;
    if sources.len() != 1 {
        bail!("{text} holds {} plugins; name one", sources.len());
    }
    let source: PluginSource = sources.pop().expect("one source");
    let fetcher = Fetcher::from_env()?;
    let fetched = fetcher.fetch(&source.source).await?;
    let origin = fetched.origin.clone();
    let engine = moat::engine::new_engine()?;
    let (registry, mut errors) = load(&engine, &[source], vec![Ok(fetched)], fetcher.progress())?;
    if let Some(error) = errors.pop() {
        return Err(error.error);
    }
    Ok((registry.plugins()[0].clone(), origin))
}

/// `moat pull`: fetches a source (each plugin of a folder) and prints `digest  source` lines.
async fn pull(text: &str) -> Result<ExitCode> {
    let fetcher = Fetcher::from_env()?;
    for (_, source) in Source::parse(text, Path::new(""))?.expand()? {
        let fetched = fetcher.fetch(&source).await?;
        tracing::info!(
            "{source}: {} bytes from {}",
            fetched.wasm.len(),
            fetched.origin
        );
        print_out(&format!("{}  {source}", fetched.digest));
    }
    Ok(ExitCode::SUCCESS)
}

/// `moat push`: publishes a component and prints its digest and the reference that pins it.
async fn push(file: &Path, target: &str) -> Result<ExitCode> {
    let Source::Oci(oci) = Source::parse(target, Path::new(""))? else {
        bail!("push publishes to an OCI registry: give an oci://host/repository:tag reference");
    };
    let wasm = read_wasm(file)?;
    moat::source::check_component(&wasm).with_context(|| file.display().to_string())?;
    let pushed = Fetcher::new(None, Progress::for_stderr())?
        .push(&oci, &wasm)
        .await?;
    let pinned = oci.pinned(&pushed.manifest);
    tracing::info!(
        "pushed {} to {oci}, manifest {}",
        file.display(),
        pushed.manifest
    );
    print_out(&format!("{}  {pinned}", pushed.digest));
    Ok(ExitCode::SUCCESS)
}

/// `moat lock`: fetches and loads every plugin of a moat.toml, shows how each differs from the
/// lock file, and writes the lock file anew. Nothing is written unless every plugin loads.
async fn lock(config_path: &Path) -> Result<ExitCode> {
    let sources = config::read(config_path)?;
    let lock_path = Lock::path_for(config_path);
    let base = config_path.parent().unwrap_or(Path::new(""));
    let old = Lock::read(&lock_path)?.unwrap_or_default();
    let fetcher = Fetcher::from_env()?;
    let fetched = fetch_all(&fetcher, &sources).await;
    let engine = moat::engine::new_engine()?;
    let (registry, errors) = load(&engine, &sources, fetched, fetcher.progress())?;
    if !errors.is_empty() {
        for error in &errors {
            eprintln!("moat: plugin \"{}\": {:#}", error.plugin, error.error);
        }
        bail!(
            "{} not written: {} of {} plugins did not load",
            lock_path.display(),
            errors.len(),
            sources.len()
        );
    }
    let new = Lock::of(&sources, &registry, base)?;
    let report = old.report(&new);
    new.write(&lock_path)?;
    print_out(&report.join("\n"));
    tracing::info!("wrote {}", lock_path.display());
    Ok(ExitCode::SUCCESS)
}

async fn inspect(source: &str, as_json: bool) -> Result<ExitCode> {
    let (plugin, origin) = load_one(source).await?;
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
            "digest": plugin.digest,
            "origin": origin,
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
    line!("\ndigest: {}\nfrom:   {origin}", plugin.digest);
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

async fn call(source: &str, tool_name: String, arguments: String) -> Result<ExitCode> {
    let arguments: Value =
        serde_json::from_str(&arguments).context("the arguments are not valid JSON")?;
    let Value::Object(arguments) = arguments else {
        bail!("the arguments must be a JSON object");
    };
    let (plugin, _) = load_one(source).await?;
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
