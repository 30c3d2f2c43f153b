//! `moat serve`: loads what is served and serves it over MCP on stdio or HTTP, reloading on change.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use rmcp::ServiceExt;

use moat::access::Principal;
use moat::cluster::Cluster;
use moat::mcp::audit::AuditLog;
use moat::mcp::catalogue::Catalogue;
use moat::mcp::server::MoatServer;
use moat::policy::Policies;
use moat::serve::config::Config;
use moat::serve::reload::{Loader, Served};
use moat::serve::reloads::{Current, Reloads};
use moat::serve::tables::{Overridden, Tables};
use moat::shared::Backends;
use moat::supply::cache::Cache;
use moat::supply::policy::{Policy, Transport};

/// How `moat serve` serves, besides what and over which transport.
pub struct Options {
    /// moat.toml and its secrets file, read once (all defaults without a config).
    pub config: Config,
    pub page_size: std::num::NonZeroUsize,
    /// The audit log, and whether it records arguments.
    pub audit: Option<(PathBuf, bool)>,
    /// Whether `audit` came from `--audit` rather than `[audit]`.
    pub audit_from_flag: bool,
    pub otlp_endpoint: Option<String>,
    /// Whether a plugin not in the cache runs Winch's code until Cranelift's is ready.
    pub tiered: bool,
}

pub async fn serve(
    served: Served,
    http: Option<(std::net::SocketAddr, moat::serve::exposure::Flags)>,
    policy: Policy,
    options: Options,
) -> Result<ExitCode> {
    let Options {
        config,
        page_size,
        audit,
        audit_from_flag,
        otlp_endpoint,
        tiered,
    } = options;
    let overridden = Overridden {
        audit: audit_from_flag,
        otlp_endpoint: otlp_endpoint.is_some(),
    };
    match &http {
        Some((addr, _)) => policy.check_transport(Transport::Http, Some(*addr))?,
        None => policy.check_transport(Transport::Stdio, None)?,
    }
    // Read before anything loads: a bad [auth] or [[access]] stops moat at once.
    let service = config.service.clone();
    let otlp_endpoint = otlp_endpoint
        .or(service.otlp_endpoint.clone())
        .or_else(|| std::env::var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").ok())
        .or_else(|| std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT").ok())
        .filter(|e| !e.is_empty());
    let stdio_principal = Principal::stdio(service.stdio_principal.as_deref().unwrap_or("stdio"));
    if let Some(metrics) = http
        .as_ref()
        .and_then(|(_, flags)| flags.metrics)
        .or(service.metrics)
    {
        // The metrics listener answers without a credential: bound where HTTP may be.
        policy.check_transport(Transport::Http, Some(metrics))?;
    }
    let cluster = service.cluster.as_ref().map(Cluster::connect).transpose()?;
    let (http, live) = match http {
        Some((addr, flags)) => {
            let settings = Tables::http_settings(&service, flags.clone(), addr, &policy)?;
            let live = settings.live.clone();
            (Some((addr, settings)), Some((addr, flags, live)))
        }
        None => (None, None),
    };
    let mut tables = Tables::new(
        &service,
        config.audit.clone(),
        overridden,
        live,
        policy.clone(),
    );
    // Read (and the claims checked) before anything loads; the files are read at each load.
    let policy_settings = config.policy.settings(&policy)?;
    let (sources, fetched) = served.fetch(config.plugins).await?;
    if sources.is_empty() {
        bail!("nothing to serve: {}", why_no_sources(&served));
    }
    // Fuel metering costs every plugin: only when one asks for it.
    let fuel = sources.iter().any(|s| s.limits.fuel.is_some());
    let to_stdout = |path: &PathBuf| path.as_os_str() == moat::mcp::audit::STDOUT;
    if http.is_none() && audit.as_ref().is_some_and(|(path, _)| to_stdout(path)) {
        bail!(
            "the audit log \"-\" is standard output, which carries MCP on stdio: give it a file, \
             or serve --http"
        );
    }
    // Standard output is no file for plugins to be kept from.
    let audit_path = audit
        .as_ref()
        .map(|(path, _)| path.clone())
        .filter(|path| !to_stdout(path));
    let audit = match audit {
        Some((path, arguments)) => {
            let mut log = AuditLog::open(&path, arguments)?;
            if let Some(cluster) = &cluster {
                log = log.with_replica(cluster.replica());
            }
            Some(Arc::new(log))
        }
        None => None,
    };
    let cache = open_cache();
    let protected: Vec<PathBuf> = [
        served.config.clone(),
        served
            .config
            .as_deref()
            .map(moat::supply::lock::Lock::path_for),
        served.secrets.clone(),
        audit_path.clone(),
        policy.source.clone(),
        cache.as_ref().map(|c| c.dir().to_path_buf()),
    ]
    .into_iter()
    .flatten()
    // A plugin that could rewrite a policy file could widen its own reach.
    .chain(policy_settings.files.iter().map(|file| file.path.clone()))
    // Plugin files and folders named here: one who may write a folder may add plugins to it.
    // (URLs and OCI references are not paths; what they fetch lies in the cache.)
    .chain(served.paths.iter().filter(|p| p.exists()).cloned())
    .collect();
    if served.config.is_some() {
        moat::sandbox::engine::set_pool_limits(config.engine)?;
    }
    let mut loader = Loader::new(moat::sandbox::engine::new_engine_with_fuel(fuel)?, cache);
    if tiered {
        loader = loader.tiered()?;
    }
    let mut loader = loader
        .with_policy(policy)
        .with_protected(protected)
        .with_private(audit_path);
    let outcome = tokio::task::block_in_place(|| loader.load_fetched(&sources, fetched))?;
    outcome.log();
    if outcome.registry.plugins().is_empty() {
        let reasons: Vec<String> = outcome
            .failed
            .iter()
            .map(|failure| format!("\n  plugin \"{}\": {:#}", failure.plugin, failure.error))
            .collect();
        bail!(
            "nothing to serve: none of the {} plugins loaded:{}",
            sources.len(),
            reasons.concat()
        );
    }
    let registry = Arc::new(outcome.registry);
    // Where replicas' shared state is kept, chosen here once for everything that keeps some.
    let backends = match &cluster {
        Some(cluster) => {
            let key = (service.request_state_key.as_deref())
                .context("[cluster] needs [http] request_state_key")?;
            let seal = moat::shared::seal::Seal::for_purpose("moat task records", key)?;
            let idle = http
                .as_ref()
                .map_or(moat::mcp::http::DEFAULT_SESSION_IDLE, |(_, s)| {
                    s.session_idle
                });
            cluster.backends(seal, idle, || moat::mcp::http::auth::caller().name)
        }
        None => Backends::alone(),
    };
    let catalogue = Catalogue::with_backends(registry, page_size, audit, backends);
    if let Some(cluster) = &cluster {
        catalogue.metrics().add_cluster(cluster);
    }
    let source_texts = moat::serve::watch::source_texts(&sources);
    let policies = Policies::load(&policy_settings, &catalogue.current(), &source_texts)?;
    if policies.is_given() {
        tracing::info!("{} Cedar policies in force", policies.len());
    }
    catalogue.set_policies(policies);
    let prepared = tables.at_start(service, &catalogue)?;
    tables.apply(prepared, &catalogue);
    if let Some(endpoint) = &otlp_endpoint {
        catalogue.set_traces(moat::mcp::traces::Traces::new(endpoint)?);
    }
    let reloads = Reloads::default();
    reloads.serving(Current {
        path: served.config.clone(),
        text: config.text.clone(),
        console: config.console.clone(),
        sources: source_texts,
    });
    // From now on, a change of what is served (or SIGHUP) reloads it.
    let watching = reloads.clone();
    moat::serve::watch::spawn(
        served,
        loader,
        tables,
        catalogue.clone(),
        &sources,
        watching,
    )?;
    if let Some((addr, mut settings)) = http {
        if let Some(console) = &config.console {
            let serving = moat::console::Serving {
                catalogue: catalogue.clone(),
                reloads,
                live: settings.live.clone(),
                https: settings.tls.is_some() || !settings.trusted_proxies.is_empty(),
                cluster: cluster.clone(),
            };
            settings.beside_on_metrics = moat::console::on_metrics(console, &settings);
            settings.beside = Some(moat::console::serve(console, addr, &settings, serving).await?);
        }
        let shutdown = tokio_util::sync::CancellationToken::new();
        tokio::spawn(stop_on_signal(
            settings.drain.draining.clone(),
            shutdown.clone(),
        ));
        let served = moat::mcp::http::serve(catalogue.clone(), addr, settings, shutdown).await;
        if let Some(traces) = catalogue.traces() {
            traces.flush();
        }
        served?;
        tracing::info!("stopped");
        return Ok(ExitCode::SUCCESS);
    }
    if config.console.is_some() {
        tracing::warn!("[console] is served with --http only: this moat serves stdio");
    }
    tracing::info!("serving MCP on stdio");
    let mut signals = Signals::listen();
    let session = MoatServer::new(catalogue.clone())
        .with_principal(stdio_principal)
        .serve(moat::mcp::stdio::pipes());
    let service = tokio::select! {
        started = session => match started {
            Ok(service) => service,
            // A client that goes away before saying anything is no error of moat's.
            Err(rmcp::service::ServerInitializeError::ConnectionClosed(_)) => {
                tracing::info!("stdin closed before the client said anything; stopping");
                return Ok(ExitCode::SUCCESS);
            }
            Err(e) => return Err(e).context("starting the MCP session"),
        },
        (name, _) = Signals::next(&mut signals) => {
            tracing::info!("{name}: stopping");
            return Ok(ExitCode::SUCCESS);
        }
    };
    let stop = service.cancellation_token();
    tokio::spawn(async move {
        let (name, _) = Signals::next(&mut signals).await;
        tracing::info!("{name}: stopping");
        stop.cancel();
        let (_, number) = Signals::next(&mut signals).await;
        // The status a shell gives a process that signal ended.
        std::process::exit(128 + number);
    });
    let ended = service.waiting().await;
    if let Some(traces) = catalogue.traces() {
        traces.flush();
    }
    ended?;
    Ok(ExitCode::SUCCESS)
}

/// Why `served` names no plugin at all.
/// SIGTERM (what service managers and Kubernetes send) or SIGINT starts the drain; a second
/// one stops taking requests at once.
async fn stop_on_signal(
    draining: tokio_util::sync::CancellationToken,
    shutdown: tokio_util::sync::CancellationToken,
) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut terminate), Ok(mut interrupt)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("could not listen for SIGTERM and SIGINT");
        return;
    };
    for told in 0.. {
        let name = tokio::select! {
            _ = terminate.recv() => "SIGTERM",
            _ = interrupt.recv() => "SIGINT",
        };
        if told == 0 {
            tracing::info!("{name}: shutting down");
            draining.cancel();
        } else {
            tracing::info!("{name} again: no longer waiting");
            shutdown.cancel();
            return;
        }
    }
}

/// SIGTERM and SIGINT on stdio. The first ends the session, so that moat exits as it does when
/// stdin closes (compiled code on its way to the cache is stored first); a second exits at once.
struct Signals {
    terminate: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
}

impl Signals {
    fn listen() -> Option<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            (Ok(terminate), Ok(interrupt)) => Some(Self {
                terminate,
                interrupt,
            }),
            _ => {
                tracing::error!("could not listen for SIGTERM and SIGINT");
                None
            }
        }
    }

    /// The next signal's name and number; never, without signals to listen to.
    async fn next(signals: &mut Option<Self>) -> (&'static str, i32) {
        let Some(signals) = signals else {
            return std::future::pending().await;
        };
        tokio::select! {
            _ = signals.terminate.recv() => ("SIGTERM", libc::SIGTERM),
            _ = signals.interrupt.recv() => ("SIGINT", libc::SIGINT),
        }
    }
}

fn why_no_sources(served: &Served) -> String {
    let folders: Vec<String> = served
        .paths
        .iter()
        .filter(|p| p.is_dir())
        .map(|p| p.display().to_string())
        .collect();
    let mut why = Vec::new();
    if !folders.is_empty() {
        why.push(format!("no .wasm file in {}", folders.join(", ")));
    }
    if let Some(config) = &served.config {
        why.push(format!("{} has no [plugins.NAME] table", config.display()));
    }
    if why.is_empty() {
        return "name plugins (files, folders, https:// URLs, oci:// references) or --config \
                moat.toml"
            .into();
    }
    why.join("; ")
}

/// The compiled-plugin cache, or none (with a warning) when it cannot be used.
pub fn open_cache() -> Option<Cache> {
    let dir = Cache::default_dir()?;
    Cache::open(&dir)
        .inspect_err(|e| tracing::warn!("compiling without a cache: {e:#}"))
        .ok()
}
