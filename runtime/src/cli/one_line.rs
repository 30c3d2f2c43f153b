//! One log event, one line. Log lines quote what callers send (a token's `kid`, a tool name, a
//! guest's output); a CR or LF among it would start a line of the caller's own that reads as
//! moat's, and an ESC would drive the terminal. Fields and messages are escaped as they are
//! formatted, so the colours and the newline moat's formatter adds around them stay as they are.

use std::fmt::{self, Write};

use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::FormatFields;
use tracing_subscriber::fmt::format::{DefaultFields, Writer};

/// tracing-subscriber's own field format, every value and message escaped.
#[derive(Debug, Default)]
pub struct EscapedFields(DefaultFields);

impl<'writer> FormatFields<'writer> for EscapedFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'writer>, fields: R) -> fmt::Result {
        // A plain writer, not `writer` itself: colours inside fields would be escaped anyway.
        let mut escaped = Escaping(writer);
        self.0.format_fields(Writer::new(&mut escaped), fields)
    }
}

/// Writes to the inner writer with every [`unsafe_in_a_line`] character escaped.
struct Escaping<W>(W);

impl<W: Write> Write for Escaping<W> {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        let mut rest = text;
        while let Some(at) = rest.find(unsafe_in_a_line) {
            self.0.write_str(&rest[..at])?;
            let c = rest[at..].chars().next().expect("found");
            write!(self.0, "{}", c.escape_default())?;
            rest = &rest[at + c.len_utf8()..];
        }
        self.0.write_str(rest)
    }
}

/// Characters that end a line or change what a line shows: C0 and C1 controls (CR, LF, ESC,
/// NEL…), DEL, the Unicode line and paragraph separators, and the bidirectional overrides
/// and isolates, which can make a line read as another.
fn unsafe_in_a_line(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{2028}' | '\u{2029}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}'
        )
}

/// What a subscriber wrote, for the tests of what moat logs.
#[cfg(test)]
#[derive(Clone, Default)]
pub(super) struct Captured(pub std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

#[cfg(test)]
impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;

    fn make_writer(&'a self) -> Captured {
        self.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn escape(text: &str) -> String {
        let mut out = String::new();
        Escaping(&mut out).write_str(text).unwrap();
        out
    }

    #[test]
    fn controls_and_separators_are_escaped_and_the_rest_kept() {
        assert_eq!(
            escape("a\r\nb\x1b[31mc\u{85}d\u{2028}e\u{2029}f\u{202E}g\x7f\th"),
            "a\\r\\nb\\u{1b}[31mc\\u{85}d\\u{2028}e\\u{2029}f\\u{202e}g\\u{7f}\\th"
        );
        assert_eq!(escape("kid \"é\" 日本 \\n"), "kid \"é\" 日本 \\n");
    }

    fn logged(ansi: bool) -> String {
        let captured = Captured::default();
        let subscriber = tracing_subscriber::fmt()
            .fmt_fields(EscapedFields::default())
            .with_writer(captured.clone())
            .with_ansi(ansi)
            .finish();
        let forged = "k1\r\n2026-12-05T08:00:00Z  INFO moat: all good\u{2028}\x1b[2J";
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!("request", caller = %forged);
            let _entered = span.enter();
            tracing::warn!(reason = %forged, "refused a token (kid \"{forged}\")");
        });
        let bytes = captured.0.lock().unwrap().clone();
        String::from_utf8(bytes).unwrap()
    }

    #[test]
    fn an_event_with_forged_lines_in_its_message_fields_and_span_is_one_line() {
        for ansi in [false, true] {
            let line = logged(ansi);
            assert_eq!(line.matches('\n').count(), 1, "{line:?}");
            assert!(line.ends_with('\n'), "{line:?}");
            assert!(!line.contains(['\r', '\u{2028}']), "{line:?}");
            // The message, the field and the span's field, each escaped.
            assert_eq!(line.matches("k1\\r\\n2026").count(), 3, "{line:?}");
            // The caller's ESC is text; with colours on, moat's own remain.
            assert!(!line.contains("\x1b[2J"), "{line:?}");
            assert_eq!(line.contains('\x1b'), ansi, "{line:?}");
        }
    }
}
