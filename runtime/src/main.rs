//! The `moat` command: serve plugins over MCP, inspect them, or call one tool once.

use std::process::ExitCode;

use clap::Parser;

mod cli;

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            // The TLS verifier logs a refused certificate as an error of its own; moat's error
            // already names it. rmcp logs every message it receives at info: a line per
            // request of every caller, which a shared server cannot afford by default.
            tracing_subscriber::EnvFilter::try_from_env("MOAT_LOG")
                .unwrap_or_else(|_| "info,rmcp=warn,rustls_platform_verifier=off".into()),
        )
        .init();
    let runtime = tokio::runtime::Runtime::new().expect("starting the async runtime");
    match runtime.block_on(cli::run(cli::Cli::parse())) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("moat: {error:#}");
            ExitCode::from(2)
        }
    }
}
