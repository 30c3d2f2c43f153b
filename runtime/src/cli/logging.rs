//! Where moat's log goes and how much of it: stderr, at the level `-q`/`-v` or `MOAT_LOG` sets,
//! one line per event whatever callers put in it: text for people, or with `--log-format json`
//! (`MOAT_LOG_FORMAT=json`) one JSON object, for collectors.

use anyhow::{Result, anyhow};
use tracing::Subscriber;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::util::SubscriberInitExt;

use moat::supply::source::Progress;

use crate::cli::one_line::EscapedFields;
use LogFormat::{Json, Text};

/// Targets kept quiet unless a filter names them: rmcp logs every message it receives (debug
/// structs at info), a line per request of every caller; the TLS verifier logs a refused
/// certificate as an error of its own, which moat's error already names.
const QUIETED: [(&str, &str); 2] = [("rmcp", "warn"), ("rustls_platform_verifier", "off")];

/// How each event is written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// A line for people: time, level, target, message and fields.
    #[default]
    Text,
    /// One JSON object a line: `timestamp`, `level`, `target`, the event's fields (`message`
    /// among them) at the top, the innermost `span` and every entered span in `spans`.
    Json,
}

/// The environment variable that picks the format when `--log-format` does not.
const FORMAT_VARIABLE: &str = "MOAT_LOG_FORMAT";

/// Starts the log on stderr, in `format` (else `MOAT_LOG_FORMAT`'s, else text), and says which
/// format it took. `verbosity` is the count of `-v` less the count of `-q`; a set `MOAT_LOG` is
/// the filter instead, and one that does not parse is an error, not ignored.
pub fn init(verbosity: i8, format: Option<LogFormat>) -> Result<LogFormat> {
    let filter = match std::env::var("MOAT_LOG") {
        Ok(text) if !text.trim().is_empty() => parse(&text)?,
        _ => parse(level_for(verbosity))?,
    };
    let format = match format {
        Some(format) => format,
        None => format_from_env()?,
    };
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    subscriber(format, filter, Stderr, ansi).try_init()?;
    Ok(format)
}

/// `MOAT_LOG_FORMAT`'s format; text when it is unset or empty.
fn format_from_env() -> Result<LogFormat> {
    match std::env::var(FORMAT_VARIABLE) {
        Ok(text) if !text.trim().is_empty() => {
            <LogFormat as clap::ValueEnum>::from_str(text.trim(), true).map_err(|_| {
                anyhow!("{FORMAT_VARIABLE}=\"{text}\" is not a log format: give text or json")
            })
        }
        _ => Ok(LogFormat::Text),
    }
}

/// The subscriber that writes events to `writer` in `format`.
fn subscriber<W>(
    format: LogFormat,
    filter: EnvFilter,
    writer: W,
    ansi: bool,
) -> Box<dyn Subscriber + Send + Sync>
where
    W: for<'a> MakeWriter<'a> + Send + Sync + 'static,
{
    let builder = tracing_subscriber::fmt()
        .with_writer(writer)
        .with_env_filter(filter);
    match format {
        Text => Box::new(
            builder
                .fmt_fields(EscapedFields::default())
                .with_ansi(ansi)
                .finish(),
        ),
        // JSON escapes every control character itself, so an event stays one line.
        Json => Box::new(
            builder
                .json()
                .flatten_event(true)
                .with_current_span(true)
                .with_span_list(true)
                .with_ansi(false)
                .finish(),
        ),
    }
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
    // The parser's error is formatted, not chained: its source repeats its own message.
    EnvFilter::builder().parse(&directives).map_err(|error| {
        anyhow!(
            "MOAT_LOG=\"{text}\" is not a log filter: give a level (error, warn, info, debug, \
             trace) or TARGET=LEVEL pairs, comma-separated (e.g. info,moat=debug): {error}"
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
    use crate::cli::one_line::Captured;

    #[test]
    fn json_is_one_object_a_line_with_the_events_and_the_spans_fields() {
        let captured = Captured::default();
        let subscriber = subscriber(Json, parse("info").unwrap(), captured.clone(), true);
        tracing::subscriber::with_default(subscriber, || {
            let outer = tracing::info_span!("request", caller = "key:ci");
            let _outer = outer.enter();
            let inner = tracing::info_span!("call", tool = "echo_echo");
            let _inner = inner.enter();
            tracing::warn!(plugin = "echo", "refused\nforged line");
            tracing::debug!("filtered out");
        });
        let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1, "{text}");
        let event: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
        assert_eq!(event["level"], "WARN");
        assert_eq!(event["message"], "refused\nforged line");
        assert_eq!(event["plugin"], "echo");
        assert_eq!(event["span"]["name"], "call");
        assert_eq!(event["span"]["tool"], "echo_echo");
        assert_eq!(event["spans"][0]["caller"], "key:ci");
        assert_eq!(event["spans"][1]["tool"], "echo_echo");
        assert!(!text.contains('\x1b'), "no colours in JSON: {text}");
    }

    #[test]
    fn a_bad_filters_error_says_the_parsers_reason_once() {
        let error = format!("{:#}", parse("debug,moat=loud").unwrap_err());
        assert_eq!(error.matches("expected one of").count(), 1, "{error}");
        assert!(error.starts_with("MOAT_LOG=\"debug,moat=loud\" is not a log filter"));
    }

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
