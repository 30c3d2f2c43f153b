//! The `moat` command: serve plugins over MCP, inspect them, or call one tool once.

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};

mod cli;

fn main() -> ExitCode {
    let matches = cli::Cli::command()
        .version(cli::version::text())
        .get_matches();
    let cli = match cli::Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(error) => error.exit(),
    };
    if let Err(error) = cli::logging::init(cli.verbosity()) {
        eprintln!("moat: {error:#}");
        return ExitCode::from(2);
    }
    let runtime = tokio::runtime::Runtime::new().expect("starting the async runtime");
    let outcome = runtime.block_on(cli::run(cli));
    moat::sandbox::instances::stop_making_ahead();
    match outcome {
        Ok(code) => code,
        Err(error) => {
            eprintln!("moat: {error:#}");
            ExitCode::from(2)
        }
    }
}
