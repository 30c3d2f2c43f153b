//! Where moat's log goes and how much of it: stderr, at the level `-q`/`-v` or `MOAT_LOG` sets,
//! one line per event whatever callers put in it.

use anyhow::{Context, Result};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;

use moat::supply::source::Progress;

use crate::cli::one_line::EscapedFields;

/// Targets kept quiet unless a filter names them: rmcp logs every message it receives (debug
/// structs at info), a line per request of every caller; the TLS verifier logs a refused
/// certificate as an error of its own, which moat's error already names.
const QUIETED: [(&str, &str); 2] = [("rmcp", "warn"), ("rustls_platform_verifier", "off")];

/// Starts the log on stderr. `verbosity` is the count of `-v` less the count of `-q`; a set
/// `MOAT_LOG` is the filter instead, and one that does not parse is an error, not ignored.
pub fn init(verbosity: i8) -> Result<()> {
    let filter = match std::env::var("MOAT_LOG") {
        Ok(text) if !text.trim().is_empty() => parse(&text)?,
        _ => parse(level_for(verbosity))?,
    };
    tracing_subscriber::fmt()
        .fmt_fields(EscapedFields::default())
        .with_writer(Stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(filter)
        .init();
    Ok(())
}

/// The filter for a count of `-v` (positive) or `-q` (negative).
fn level_for(verbosity: i8) -> &'static str {
    match verbosity {
        i8::MIN..=-2 => "error",
        -1 => "warn",
        0 => "info",
        1 => "info,moat=debug",
        2 => "debug",
        _ => "trace",
    }
}

/// `text` as a filter, with the quieted targets quiet unless it names them itself.
fn parse(text: &str) -> Result<EnvFilter> {
    let mut directives = text.trim().to_string();
    for (target, level) in QUIETED {
        if !directives.contains(target) {
            directives.push_str(&format!(",{target}={level}"));
        }
    }
    EnvFilter::builder().parse(&directives).with_context(|| {
        format!(
            "MOAT_LOG=\"{text}\" is not a log filter: give a level (error, warn, info, debug, \
                 trace) or TARGET=LEVEL pairs, comma-separated (e.g. info,moat=debug)"
        )
    })
}

/// stderr, with any progress bar wiped while a line is written.
struct Stderr;

struct Line;

impl std::io::Write for Line {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        Progress::suspend(|| std::io::stderr().write_all(buf))?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

impl<'a> MakeWriter<'a> for Stderr {
    type Writer = Line;

    fn make_writer(&'a self) -> Line {
        Line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_filter_is_an_error_and_rmcp_stays_quiet() {
        assert!(parse("debug,moat=loud").is_err());
        assert!(parse("info").unwrap().to_string().contains("rmcp=warn"));
        assert!(
            parse("rmcp=debug")
                .unwrap()
                .to_string()
                .contains("rmcp=debug")
        );
    }
}
