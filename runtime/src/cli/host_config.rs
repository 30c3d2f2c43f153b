//! `moat config HOST`: what an MCP host needs to start this moat, printed or merged into the
//! host's own config file.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};

use super::host_auth::{self, TokenIn};
use super::host_files;
use super::hosts::{self, Host, Launch, snippet};
use super::{print_out, reach};

/// The host, and the moat it is to start or reach.
#[derive(clap::Args)]
pub struct HostConfigArgs {
    /// The host: claude-desktop, claude-code, cursor or vscode.
    #[arg(required = true)]
    pub host: Option<Host>,
    /// Plugins: files, folders, https:// URLs, oci:// references.
    pub plugins: Vec<PathBuf>,
    /// A moat.toml naming plugins and their limits.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Point the host at a moat serving Streamable HTTP at this address instead.
    #[arg(long, value_name = "ADDRESS", value_parser = moat::mcp::http::parse_listen_address)]
    pub http: Option<std::net::SocketAddr>,
    /// The server's name in the host's configuration.
    #[arg(long, default_value = "moat")]
    pub name: String,
    /// With --http: the local token's file, as given to `moat serve --token-file`.
    #[arg(long, value_name = "FILE", requires = "http")]
    pub token_file: Option<PathBuf>,
    #[command(flatten)]
    pub write: host_files::WriteArgs,
}

/// Prints the host's entry for this moat, or with `--write` merges it into the host's file.
pub fn run(args: HostConfigArgs) -> Result<ExitCode> {
    let HostConfigArgs {
        host,
        plugins,
        config,
        http,
        name,
        token_file,
        write,
    } = args;
    let host = host.context("name the host")?;
    let launch = match http {
        Some(addr) => {
            let service = hosts::service(config.as_deref())?;
            let reach = reach::url(addr, &service)?;
            if let Some(note) = &reach.note {
                eprintln!("moat: {note}");
            }
            Launch::Http {
                url: reach.url,
                credential: host_auth::credential(&service, token_file)?,
            }
        }
        None => {
            let cwd = std::env::current_dir()?;
            hosts::check_sources(&plugins, config.as_deref(), &cwd)?;
            Launch::stdio(std::env::current_exe()?, &plugins, config.as_deref(), &cwd)
        }
    };
    if write.write {
        return host_files::write(host, &name, &launch, write.file);
    }
    print_out(&snippet(host, &name, &launch)?);
    if let Launch::Http { credential, .. } = &launch
        && let Some(note) = host_auth::note(host, &name, None, credential, TokenIn::Entry)
    {
        eprintln!("moat: {note}");
    }
    Ok(ExitCode::SUCCESS)
}
