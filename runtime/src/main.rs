//! The `moat` command: serve plugins over MCP, inspect them, or call one tool once.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use rmcp::ServiceExt;
use serde_json::{Value, json};

use moat::audit::AuditLog;
use moat::cache::Cache;
use moat::catalogue::Catalogue;
use moat::config;
use moat::hosts::{Host, Launch, snippet};
use moat::lock::Lock;
use moat::plugin::{Plugin, read_wasm, sanitize};
use moat::policy::{Policy, Transport};
use moat::registry::{LoadError, PluginSource, Registry};
use moat::reload::{Loader, Served};
use moat::server::MoatServer;
use moat::signing;
use moat::source::{Fetched, Fetcher, Progress, Source, Store, fetch_all};

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
        /// The secrets file for `${secret:NAME}` in moat.toml, instead of the one it names.
        #[arg(long, requires = "config")]
        secrets: Option<PathBuf>,
        /// Serve Streamable HTTP at http://ADDRESS/mcp instead of stdio: HOST:PORT, or a bare
        /// PORT on 127.0.0.1.
        #[arg(long, value_name = "ADDRESS", value_parser = moat::http::parse_listen_address)]
        http: Option<std::net::SocketAddr>,
        #[command(flatten)]
        trust: TrustArgs,
        /// Append one JSON line per tool call to FILE (overrides `[audit]` in moat.toml).
        #[arg(long, value_name = "FILE")]
        audit: Option<PathBuf>,
        /// Record the arguments of each call in the audit log, not only their digest.
        #[arg(long, requires = "audit")]
        audit_arguments: bool,
        /// Tools per `tools/list` page.
        #[arg(long, value_name = "N", default_value_t = moat::catalogue::DEFAULT_PAGE_SIZE)]
        page_size: std::num::NonZeroUsize,
    },
    /// Show a plugin's tools, their schemas and descriptions, what it imports, its permission
    /// manifest and what became of each grant.
    Inspect {
        /// A file, an https:// URL or an oci:// reference; with --config, the plugin's name (or
        /// file) in that config.
        plugin: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Inspect the plugin with the grants this moat.toml gives it.
        #[arg(long)]
        config: Option<PathBuf>,
        #[command(flatten)]
        trust: TrustArgs,
    },
    /// Sign a plugin with a minisign secret key, writing FILE.minisig.
    Sign {
        /// The minisign secret key (an encrypted key's password: MOAT_SIGN_PASSWORD, else asked).
        #[arg(long, value_name = "SECRET.key")]
        key: PathBuf,
        file: PathBuf,
    },
    /// Check a plugin's FILE.minisig against a public key, or against the publishers of a policy.
    Verify {
        /// A minisign public key file.
        #[arg(long, value_name = "PUB", required_unless_present = "policy")]
        key: Option<PathBuf>,
        /// A policy whose [publishers] to trust.
        #[arg(long, value_name = "FILE", conflicts_with = "key")]
        policy: Option<PathBuf>,
        file: PathBuf,
    },
    /// Check a moat.toml against an enterprise policy without running anything.
    Policy {
        #[command(subcommand)]
        action: PolicyAction,
    },
    /// Print what an MCP host needs to start this moat with these arguments, or (`moat config
    /// schema`) the JSON Schema of moat.toml.
    #[command(
        args_conflicts_with_subcommands = true,
        subcommand_negates_reqs = true,
        disable_help_subcommand = true
    )]
    Config {
        #[command(subcommand)]
        action: Option<ConfigAction>,
        /// The host: claude-desktop, claude-code, cursor or vscode.
        #[arg(required = true)]
        host: Option<Host>,
        /// Plugins: files, folders, https:// URLs, oci:// references.
        plugins: Vec<PathBuf>,
        /// A moat.toml naming plugins and their limits.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Point the host at a moat serving Streamable HTTP at this address instead.
        #[arg(long, value_name = "ADDRESS", value_parser = moat::http::parse_listen_address)]
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

/// The enterprise policy to apply: the system one when it exists, else this one.
#[derive(clap::Args)]
struct TrustArgs {
    /// An administrator's policy file (default: /etc/moat/policy.toml when present).
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
}

#[derive(Subcommand)]
enum PolicyAction {
    /// Say for each plugin of the config whether the policy lets it load, and what it is granted.
    Check {
        #[command(flatten)]
        trust: TrustArgs,
        #[arg(long)]
        config: PathBuf,
    },
    /// Say why a plugin of the config may load or not, and why each grant was allowed or cut.
    Explain {
        #[command(flatten)]
        trust: TrustArgs,
        #[arg(long)]
        config: PathBuf,
        /// The plugin's name in the config.
        plugin: String,
    },
}

#[derive(Subcommand)]
enum ConfigAction {
    /// Print the JSON Schema of moat.toml, for editors to check the file and explain its keys.
    Schema,
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
            // The TLS verifier logs a refused certificate as an error of its own; moat's error
            // already names it.
            tracing_subscriber::EnvFilter::try_from_env("MOAT_LOG")
                .unwrap_or_else(|_| "info,rustls_platform_verifier=off".into()),
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
            secrets,
            http,
            trust,
            audit,
            audit_arguments,
            page_size,
        } => {
            let policy = Policy::resolve(trust.policy.as_deref())?;
            let audit = match (audit, &config) {
                (Some(path), _) => Some((path, audit_arguments)),
                (None, Some(config)) => config::read_audit(config)?.map(|a| (a.path, a.arguments)),
                (None, None) => None,
            };
            let served = Served {
                paths: plugins.iter().map(PathBuf::from).collect(),
                config,
                secrets,
            };
            serve(served, http, page_size, policy, audit).await
        }
        Command::Inspect {
            plugin,
            json,
            config,
            trust,
        } => {
            let policy = Policy::resolve(trust.policy.as_deref())?;
            inspect(&plugin, config.as_deref(), json, &policy).await
        }
        Command::Pull { source } => pull(&source).await,
        Command::Push { file, reference } => push(&file, &reference).await,
        Command::Lock { config } => lock(&config).await,
        Command::Sign { key, file } => {
            let out = signing::sign_file(&key, &file)?;
            eprintln!("moat: wrote {}", out.display());
            Ok(ExitCode::SUCCESS)
        }
        Command::Verify { key, policy, file } => verify(key, policy, file),
        Command::Policy { action } => match action {
            PolicyAction::Check { trust, config } => {
                policy_check(&Policy::resolve(trust.policy.as_deref())?, &config, None).await
            }
            PolicyAction::Explain {
                trust,
                config,
                plugin,
            } => {
                policy_check(
                    &Policy::resolve(trust.policy.as_deref())?,
                    &config,
                    Some(&plugin),
                )
                .await
            }
        },
        Command::Call {
            plugin,
            tool,
            arguments,
        } => call(&plugin, tool, arguments).await,
        Command::Config {
            action: Some(ConfigAction::Schema),
            ..
        } => {
            print_out(&serde_json::to_string_pretty(&config::json_schema())?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Config {
            action: None,
            host,
            plugins,
            config,
            http,
            name,
        } => {
            let host = host.context("name the host")?;
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
    served: Served,
    http: Option<std::net::SocketAddr>,
    page_size: std::num::NonZeroUsize,
    policy: Policy,
    audit: Option<(PathBuf, bool)>,
) -> Result<ExitCode> {
    match http {
        Some(addr) => policy.check_transport(Transport::Http, Some(addr))?,
        None => policy.check_transport(Transport::Stdio, None)?,
    }
    let (sources, fetched) = served.fetch().await?;
    // Fuel metering costs every plugin: only when one asks for it.
    let fuel = sources.iter().any(|s| s.limits.fuel.is_some());
    let audit_path = audit.as_ref().map(|(path, _)| path.clone());
    let audit = match audit {
        Some((path, arguments)) => Some(Arc::new(AuditLog::open(&path, arguments)?)),
        None => None,
    };
    let cache = open_cache();
    let protected: Vec<PathBuf> = [
        served.config.clone(),
        served.config.as_deref().map(moat::lock::Lock::path_for),
        served.secrets.clone(),
        audit_path.clone(),
        policy.source.clone(),
        cache.as_ref().map(|c| c.dir().to_path_buf()),
    ]
    .into_iter()
    .flatten()
    // Plugin files and folders named here: one who may write a folder may add plugins to it.
    // (URLs and OCI references are not paths; what they fetch lies in the cache.)
    .chain(served.paths.iter().filter(|p| p.exists()).cloned())
    .collect();
    let mut loader = Loader::new(moat::engine::new_engine_with_fuel(fuel)?, cache)
        .with_policy(policy)
        .with_audit(audit)
        .with_protected(protected)
        .with_private(audit_path);
    let outcome = tokio::task::block_in_place(|| loader.load_fetched(&sources, fetched))?;
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
    let service = match MoatServer::new(catalogue)
        .serve(rmcp::transport::stdio())
        .await
    {
        Ok(service) => service,
        // A client that goes away before saying anything is no error of moat's.
        Err(rmcp::service::ServerInitializeError::ConnectionClosed(_)) => {
            tracing::info!("stdin closed before the client said anything; stopping");
            return Ok(ExitCode::SUCCESS);
        }
        Err(e) => return Err(e).context("starting the MCP session"),
    };
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

/// The plugin of `config` named `plugin`, or whose file `plugin` is.
fn configured_source(config: &Path, plugin: &str) -> Result<PluginSource> {
    let wanted = Path::new(plugin).canonicalize().ok();
    config::read(config)?
        .into_iter()
        .find(|s| {
            let file = match &s.source {
                Source::File(path) => path.canonicalize().ok(),
                _ => None,
            };
            plugin == s.name || (wanted.is_some() && file == wanted)
        })
        .with_context(|| format!("{} has no plugin {plugin}", config.display()))
}

/// Compiles the fetched plugins under `policy` (from the compiled-plugin cache when it has
/// them), with a spinner on a terminal.
fn load(
    engine: &wasmtime::Engine,
    sources: &[PluginSource],
    fetched: Vec<Result<Fetched>>,
    progress: &Progress,
    policy: &Policy,
) -> Result<(Registry, Vec<LoadError>)> {
    let cache = open_cache();
    let spinner = progress.spinner(&format!("compiling {} plugins", sources.len()));
    let loaded = Registry::load_fetched(engine, sources, fetched, cache.as_ref(), policy);
    spinner.finish_and_clear();
    loaded
}

/// Loads the one plugin a source string names, for `inspect` and `call`, with where it came from.
async fn load_one(text: &str, policy: &Policy) -> Result<(Arc<Plugin>, String)> {
    let mut sources = config::sources_from_args(&[text.to_string()])?;
    if sources.len() != 1 {
        bail!("{text} holds {} plugins; name one", sources.len());
    }
    load_source(sources.pop().expect("one source"), policy).await
}

/// Fetches and loads one plugin under `policy`, with the grants of `source`.
async fn load_source(source: PluginSource, policy: &Policy) -> Result<(Arc<Plugin>, String)> {
    let fetcher = Fetcher::from_env();
    let fetched = fetcher.fetch(&source.source).await?;
    let origin = fetched.origin.clone();
    let engine = moat::engine::new_engine_with_fuel(source.limits.fuel.is_some())?;
    let (registry, mut errors) = load(
        &engine,
        &[source],
        vec![Ok(fetched)],
        fetcher.progress(),
        policy,
    )?;
    if let Some(error) = errors.pop() {
        return Err(error.error);
    }
    Ok((registry.plugins()[0].clone(), origin))
}

/// `moat pull`: fetches a source (each plugin of a folder) and prints `digest  source` lines.
async fn pull(text: &str) -> Result<ExitCode> {
    let fetcher = Fetcher::from_env();
    for (_, source) in Source::parse(text, Path::new(""))?.expand()? {
        let fetched = fetcher.fetch(&source).await?;
        let signed = match fetched.signature {
            Some(_) => ", with a publisher's signature",
            None => ", unsigned",
        };
        tracing::info!(
            "{source}: {} bytes from {}{signed}",
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
    let signature = signing::read_detached(file)?;
    let pushed = Fetcher::new(None, Progress::for_stderr())
        .push(&oci, &wasm, signature.as_deref())
        .await?;
    let pinned = oci.pinned(&pushed.manifest);
    let signed = match signature {
        Some(_) => format!(
            ", with its signature {}",
            signing::signature_path(file).display()
        ),
        None => String::new(),
    };
    tracing::info!(
        "pushed {} to {oci}, manifest {}{signed}",
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
    let fetcher = Fetcher::from_env();
    let fetched = fetch_all(&fetcher, &sources).await;
    let engine = moat::engine::new_engine()?;
    let policy = Policy::resolve(None)?;
    let (registry, errors) = load(&engine, &sources, fetched, fetcher.progress(), &policy)?;
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

async fn inspect(
    text: &str,
    config: Option<&Path>,
    as_json: bool,
    policy: &Policy,
) -> Result<ExitCode> {
    let (plugin, origin) = match config {
        Some(config) => load_source(configured_source(config, text)?, policy).await?,
        None => load_one(text, policy).await?,
    };
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
            "publisher": plugin.admission.publisher,
            "manifest": plugin.admission.manifest,
            "grants": plugin.admission.notes,
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
    let admission = &plugin.admission;
    if let Some(publisher) = &admission.publisher {
        line!("signed by: {publisher}");
    }
    match &admission.manifest {
        Some(manifest) => line!(
            "\nmanifest (what it asks for):\n  {}",
            serde_json::to_string(manifest)?
        ),
        None => line!("\nmanifest: none (the operator's grants apply as written)"),
    }
    line!("\ngrants:");
    for note in &admission.notes {
        line!("  {note}");
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
    let (plugin, _) = load_one(source, &Policy::resolve(None)?).await?;
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

/// `moat verify`: checks FILE.minisig over FILE's bytes.
fn verify(key: Option<PathBuf>, policy: Option<PathBuf>, file: PathBuf) -> Result<ExitCode> {
    let keys = match (key, policy) {
        (Some(key), _) => vec![signing::TrustedKey::from_file(&key)?],
        (None, Some(policy)) => Policy::read(&policy)?.publishers,
        (None, None) => bail!("give --key or --policy"),
    };
    let wasm = std::fs::read(&file).with_context(|| format!("reading {}", file.display()))?;
    let signature_path = signing::signature_path(&file);
    let signature = std::fs::read_to_string(&signature_path)
        .with_context(|| format!("reading the signature {}", signature_path.display()))?;
    match signing::verify(&wasm, &signature, &keys) {
        Ok(key) => {
            print_out(&format!(
                "{}: good signature by \"{}\" (key {}), {}",
                file.display(),
                key.publisher,
                key.id,
                moat::source::Digest::of(&wasm)
            ));
            Ok(ExitCode::SUCCESS)
        }
        Err(error) => {
            eprintln!("moat: {}: {error}", file.display());
            Ok(ExitCode::from(1))
        }
    }
}

/// `moat policy check` (every plugin, `only` = None) and `moat policy explain` (one plugin):
/// admits each plugin of the config as `serve` would, without compiling or running it.
async fn policy_check(
    policy: &Policy,
    config_path: &std::path::Path,
    only: Option<&str>,
) -> Result<ExitCode> {
    let mut sources = config::read(config_path)?;
    if let Some(name) = only {
        sources.retain(|s| s.name == name);
        if sources.is_empty() {
            bail!("{} has no plugin \"{name}\"", config_path.display());
        }
    }
    // Remote plugins are fetched (or revalidated) as `serve` would: a policy decides on the
    // bytes and the signature that came with them.
    let fetched = fetch_all(&Fetcher::from_env(), &sources).await;
    let mut refused = 0;
    let mut out = String::new();
    for (source, fetched) in sources.iter().zip(fetched) {
        let admitted = fetched.and_then(|fetched| policy.admit(source, &fetched));
        match admitted {
            Err(error) => {
                refused += 1;
                out.push_str(&format!("{}: refused: {error:#}\n", source.name));
            }
            Ok(admitted) => {
                out.push_str(&format!(
                    "{}: allowed by {}\n",
                    source.name, admitted.allowed_by
                ));
                out.push_str(&format!("  digest: {}\n", admitted.digest));
                if let Some(publisher) = &admitted.publisher {
                    out.push_str(&format!("  signed by: {publisher}\n"));
                }
                if only.is_some() {
                    match &admitted.manifest {
                        Some(m) => {
                            out.push_str(&format!("  asks for: {}\n", serde_json::to_string(m)?))
                        }
                        None => out.push_str("  asks for: (no manifest)\n"),
                    }
                }
                for note in &admitted.notes {
                    let quiet = note.fate == moat::policy::Fate::Granted && only.is_none();
                    if !quiet {
                        out.push_str(&format!("  {note}\n"));
                    }
                }
            }
        }
    }
    print_out(out.trim_end());
    Ok(if refused > 0 {
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
