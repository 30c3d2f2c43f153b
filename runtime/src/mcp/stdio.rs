//! MCP on stdio: rmcp's pipes, with a line that is not JSON at all logged before it is dropped.
//!
//! rmcp drops such a line as every official SDK does (an answer could start an error storm with
//! a peer that echoes it), but says so only at debug level, quoting the whole line, under a
//! target moat keeps quiet. [`CheckedLines`] sees each line first: one that is not JSON is a
//! warning naming its length and its first bytes, escaped, and never reaches rmcp. Every other
//! line, and a line too long to hold (which rmcp drops itself, with an error), passes unchanged.

use std::pin::Pin;
use std::task::{Context, Poll};

use rmcp::transport::{StdioReader, StdioWriter};
use tokio::io::{AsyncRead, ReadBuf};

/// The longest line held back to be checked: rmcp's own limit. A longer one is passed on as
/// it comes, for rmcp to drop.
const MAX_LINE_BYTES: usize = rmcp::transport::async_rw::DEFAULT_MAX_LINE_LENGTH;
/// How much of a dropped line its warning shows.
const SHOWN_BYTES: usize = 32;
/// How much is read from stdin at once.
const CHUNK_BYTES: usize = 64 << 10;

/// stdin and stdout for rmcp, stdin's lines checked.
pub fn pipes() -> (CheckedLines<StdioReader>, StdioWriter) {
    let (reader, writer) = rmcp::transport::stdio_pipes();
    (CheckedLines::new(reader), writer)
}

/// A reader that passes on its inner reader's lines, but those that are not JSON.
pub struct CheckedLines<R> {
    inner: R,
    /// The line being read, up to its newline.
    line: Vec<u8>,
    /// Bytes passed on, waiting for the reader: `ready[handed..]` are still to give.
    ready: Vec<u8>,
    handed: usize,
    /// The line being read is too long to hold, and is passed on as it comes.
    passing: bool,
    chunk: Box<[u8]>,
    eof: bool,
}

impl<R> CheckedLines<R> {
    pub fn new(inner: R) -> Self {
        Self {
            inner,
            line: Vec::new(),
            ready: Vec::new(),
            handed: 0,
            passing: false,
            chunk: vec![0; CHUNK_BYTES].into_boxed_slice(),
            eof: false,
        }
    }

    /// Sorts bytes read from the inner reader into lines, passing on the ones to keep.
    fn take(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let newline = bytes.iter().position(|&b| b == b'\n');
            let (part, rest) = match newline {
                Some(at) => bytes.split_at(at + 1),
                None => (bytes, &[][..]),
            };
            bytes = rest;
            if self.passing {
                self.ready.extend_from_slice(part);
                self.passing = newline.is_none();
                continue;
            }
            self.line.extend_from_slice(part);
            if newline.is_some() {
                if is_json_or_blank(&self.line) {
                    self.ready.extend_from_slice(&self.line);
                }
                self.line.clear();
            } else if self.line.len() > MAX_LINE_BYTES {
                self.ready.append(&mut self.line);
                self.passing = true;
            }
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for CheckedLines<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.handed < this.ready.len() {
                let give = (this.ready.len() - this.handed).min(buf.remaining());
                buf.put_slice(&this.ready[this.handed..this.handed + give]);
                this.handed += give;
                if this.handed == this.ready.len() {
                    this.ready.clear();
                    this.handed = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if this.eof {
                // A last line without its newline is incomplete: rmcp ignores it, as it is.
                if this.line.is_empty() {
                    return Poll::Ready(Ok(()));
                }
                this.ready.append(&mut this.line);
                continue;
            }
            let mut chunk = ReadBuf::new(&mut this.chunk);
            match Pin::new(&mut this.inner).poll_read(cx, &mut chunk) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(error)) => return Poll::Ready(Err(error)),
                Poll::Ready(Ok(())) => {
                    let read = chunk.filled().len();
                    if read == 0 {
                        this.eof = true;
                    } else {
                        let chunk = std::mem::take(&mut this.chunk);
                        this.take(&chunk[..read]);
                        this.chunk = chunk;
                    }
                }
            }
        }
    }
}

/// Whether `line` (with its newline) is JSON or blank, as rmcp reads it (a CR before the
/// newline and a UTF-8 byte order mark are not part of it); logs a warning when it is not.
fn is_json_or_blank(line: &[u8]) -> bool {
    let body = line.strip_suffix(b"\n").unwrap_or(line);
    let body = body.strip_suffix(b"\r").unwrap_or(body);
    let body = body.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(body);
    if body.iter().all(u8::is_ascii_whitespace) {
        return true;
    }
    match serde_json::from_slice::<serde::de::IgnoredAny>(body) {
        Ok(_) => true,
        Err(error) => {
            let shown: String = body[..body.len().min(SHOWN_BYTES)]
                .iter()
                .flat_map(|&b| std::ascii::escape_default(b))
                .map(char::from)
                .collect();
            let more = if body.len() > SHOWN_BYTES { "…" } else { "" };
            tracing::warn!(
                "dropped a line of {} bytes on stdin that is not JSON ({error}); it starts \
                 \"{shown}{more}\"",
                body.len()
            );
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt;

    use super::*;

    /// What a reader fed `chunks` one by one passes on.
    async fn passed(chunks: &[&[u8]]) -> Vec<u8> {
        // Chained, the chunks come one per read, as a pipe may hand them over.
        let mut reader: Box<dyn AsyncRead + Unpin + '_> = Box::new(tokio::io::empty());
        for chunk in chunks.iter().rev() {
            reader = Box::new(AsyncReadExt::chain(*chunk, reader));
        }
        let mut out = Vec::new();
        CheckedLines::new(reader)
            .read_to_end(&mut out)
            .await
            .unwrap();
        out
    }

    #[tokio::test]
    async fn json_lines_pass_whole_and_the_rest_are_dropped() {
        let out = passed(&[
            b"{\"jsonrpc\":\"2.0\",",
            b"\"id\":1}\nhello there\n\r\n[1,\n",
            b"\xEF\xBB\xBF{}\r\n{\"a\":",
            b"1}",
        ])
        .await;
        // The unfinished last line goes on too: it is rmcp's to ignore.
        assert_eq!(
            out,
            b"{\"jsonrpc\":\"2.0\",\"id\":1}\n\r\n\xEF\xBB\xBF{}\r\n{\"a\":1}".to_vec()
        );
    }

    #[tokio::test]
    async fn a_line_too_long_to_hold_passes_as_it_comes() {
        let long = vec![b'x'; MAX_LINE_BYTES + 10];
        let out = passed(&[&long, b"yy\n{}\n"]).await;
        assert_eq!(out.len(), long.len() + 6);
        assert!(out.ends_with(b"xxyy\n{}\n"));
    }
}
