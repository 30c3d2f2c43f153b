//! `moat serve`'s flags, as given and as resolved: the policy, the audit log, moat.toml read
//! once, the HTTP flags; [`super::serve`] serves what they resolve to.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;

use moat::serve::reload::Served;
use moat::supply::policy::Policy;

use super::TrustArgs;
use super::serve::{Options, serve};

/// What `moat serve` serves, how, and to whom.
#[derive(clap::Args)]
pub struct ServeArgs {
    /// Plugins: files, folders (every `.wasm` file in them), https:// URLs, oci:// references.
    plugins: Vec<String>,
    /// A moat.toml naming plugins and their limits.
    #[arg(long)]
    config: Option<PathBuf>,
    /// The secrets file for `${secret:NAME}` in moat.toml, instead of the one it names.
    #[arg(long, requires = "config")]
    secrets: Option<PathBuf>,
    /// Serve Streamable HTTP at http://ADDRESS/mcp instead of stdio: IP:PORT, localhost:PORT,
    /// or a bare PORT on 127.0.0.1.
    #[arg(long, value_name = "ADDRESS", value_parser = moat::mcp::http::parse_listen_address)]
    http: Option<std::net::SocketAddr>,
    #[command(flatten)]
    trust: TrustArgs,
    /// Append one JSON line per tool call, prompt and resource read to FILE (overrides
    /// `[audit]` in moat.toml).
    #[arg(long, value_name = "FILE")]
    audit: Option<PathBuf>,
    /// Record the arguments of each call in the audit log, not only their digest.
    #[arg(long, requires = "audit")]
    audit_arguments: bool,
    /// Tools per `tools/list` page.
    #[arg(long, value_name = "N", default_value_t = moat::mcp::catalogue::DEFAULT_PAGE_SIZE)]
    page_size: std::num::NonZeroUsize,
    #[command(flatten)]
    http_flags: HttpArgs,
    /// Send a trace span of every tool call to this OTLP/HTTP collector
    /// (`http://127.0.0.1:4318`); default: `[telemetry]` in moat.toml, else
    /// $OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or $OTEL_EXPORTER_OTLP_ENDPOINT, else none.
    #[arg(long, value_name = "URL")]
    otlp_endpoint: Option<String>,
    /// Compile every plugin not in the compiled-plugin cache with Cranelift before serving,
    /// instead of serving it at once on Winch's code and swapping Cranelift's in when ready.
    #[arg(long)]
    no_tiering: bool,
}

/// How `moat serve --http` authenticates and is reached.
#[derive(clap::Args)]
struct HttpArgs {
    /// Serve HTTP without authentication: any local process may call every tool. Loopback
    /// addresses only; a policy may forbid it.
    #[arg(long, requires = "http")]
    no_auth: bool,
    /// The local bearer token's file (default: $MOAT_TOKEN_FILE, else
    /// ~/.config/moat/http-token), created on first use, readable by its owner only.
    #[arg(
        long,
        value_name = "FILE",
        requires = "http",
        conflicts_with = "no_auth"
    )]
    token_file: Option<PathBuf>,
    /// Serve HTTPS with this PEM certificate chain (reloaded when it changes).
    #[arg(long, value_name = "PEM", requires_all = ["http", "tls_key"])]
    tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Serve /metrics on this address, without authentication, instead of beside /mcp.
    #[arg(long, value_name = "ADDRESS", requires = "http", value_parser = moat::mcp::http::parse_listen_address)]
    metrics: Option<std::net::SocketAddr>,
}

/// Resolves `args` (the policy in force, moat.toml and its secrets read once, the audit log
/// the flags or the config name) and serves.
pub async fn run(args: ServeArgs) -> Result<ExitCode> {
    let ServeArgs {
        plugins,
        config,
        secrets,
        http,
        trust,
        audit,
        audit_arguments,
        page_size,
        http_flags,
        otlp_endpoint,
        no_tiering,
    } = args;
    let policy = Policy::resolve(trust.policy.as_deref())?;
    let served = Served {
        paths: plugins.iter().map(PathBuf::from).collect(),
        config,
        secrets,
        denied_tools: policy.deny_tools.clone(),
    };
    let config = served.read()?;
    let audit_from_flag = audit.is_some();
    let audit = match audit {
        Some(path) => Some((path, audit_arguments)),
        None => config.audit.clone().map(|a| (a.path, a.arguments)),
    };
    let flags = moat::serve::exposure::Flags {
        no_auth: http_flags.no_auth,
        token_file: http_flags.token_file,
        tls_cert: http_flags.tls_cert,
        tls_key: http_flags.tls_key,
        metrics: http_flags.metrics,
    };
    let options = Options {
        config,
        page_size,
        audit,
        audit_from_flag,
        otlp_endpoint,
        tiered: !no_tiering,
    };
    serve(served, http.map(|addr| (addr, flags)), policy, options).await
}
