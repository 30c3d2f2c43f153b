//! The `moat` command: serve plugins over MCP, inspect them, or call one tool once.

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};

mod cli;

/// Compiling plugins is allocation-bound and spread over threads: with mimalloc, 50 plugins are
/// listed a quarter sooner than with glibc's allocator (README: Performance, P3). Its huge pages
/// are off (`no_thp`): they made a big component's cold start slower and idle memory larger.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let matches = cli::Cli::command()
        .version(cli::version::text())
        .get_matches();
    let cli = match cli::Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(error) => error.exit(),
    };
    let format = match cli::logging::init(cli.verbosity(), cli.log_format()) {
        Ok(format) => format,
        Err(error) => {
            eprintln!("moat: {error:#}");
            return ExitCode::from(2);
        }
    };
    let runtime = tokio::runtime::Runtime::new().expect("starting the async runtime");
    let outcome = runtime.block_on(cli::run(cli));
    moat::sandbox::instances::stop_making_ahead();
    // Whatever ended the run (stdin closed, a signal, a command done), compiled code on its way
    // to the cache gets there: else the next start compiles again.
    moat::supply::cache::finish_writes(moat::supply::cache::EXIT_WAIT);
    match outcome {
        Ok(code) => code,
        Err(error) => {
            // A collector reading JSON gets the reason moat stopped as one more object.
            match format {
                cli::logging::LogFormat::Json => tracing::error!("{error:#}"),
                cli::logging::LogFormat::Text => eprintln!("moat: {error:#}"),
            }
            ExitCode::from(2)
        }
    }
}
