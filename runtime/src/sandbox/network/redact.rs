//! Injected credentials taken out of the answers they could come back in.
//!
//! moat adds a credential to a request so that the guest never holds it; an upstream that
//! echoes its request (a debugging endpoint, an error page quoting the `Authorization` header)
//! would hand it back. So every credential a request carried is replaced by `[redacted]` in the
//! answer's headers, body and trailers before the guest reads a byte of them, across chunk
//! boundaries. Redaction sees raw bytes, so a request carrying a credential asks for its answer
//! whole and unencoded (`Accept-Encoding: identity`, no `Range`): a guest cannot have the echo
//! compressed, or cut into pieces none of which holds the whole credential, and an answer that
//! comes encoded or partial anyway is refused. What redaction cannot undo is an upstream that
//! transforms the credential itself before echoing it: credentials go only to the hosts an
//! operator named for them, which are trusted not to.

use http::HeaderValue;
use http_body_util::BodyExt;
use hyper::body::{Bytes, Frame};
use wasmtime_wasi_http::WasiBody;

/// A short digest of a secret (a consent link, a state), for logs and the audit: names it
/// without giving what would finish it.
pub fn digest(secret: &str) -> String {
    use sha2::Digest as _;
    let hash = sha2::Sha256::digest(secret.as_bytes());
    hash[..6].iter().map(|b| format!("{b:02x}")).collect()
}

/// What a credential becomes in an answer.
const REDACTED: &[u8] = b"[redacted]";

/// Credentials shorter than this are not looked for: every answer would be full of false hits,
/// and so short a credential protects nothing anyway.
const MIN_SECRET_BYTES: usize = 8;

/// The bytes of one credential a request carried.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Vec<u8>);

impl Secret {
    pub fn new(bytes: Vec<u8>) -> Option<Self> {
        (bytes.len() >= MIN_SECRET_BYTES).then_some(Self(bytes))
    }

    /// What to look for of a fixed header value: the whole value, and the part after its
    /// scheme (`Bearer TOKEN`, `Basic …`), which an echo may quote alone.
    pub fn of_header(value: &[u8]) -> Vec<Self> {
        let mut secrets: Vec<Self> = Self::new(value.to_vec()).into_iter().collect();
        if let Some(space) = value.iter().rposition(|b| *b == b' ')
            && let Some(token) = Self::new(value[space + 1..].to_vec())
        {
            secrets.push(token);
        }
        secrets
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret(<{} bytes>)", self.0.len())
    }
}

/// Asks for the answer to a request that carries a credential whole and unencoded, whatever
/// the guest asked: redaction could not see through an encoding or across ranges.
pub(super) fn request(headers: &mut http::HeaderMap) {
    headers.insert(
        http::header::ACCEPT_ENCODING,
        HeaderValue::from_static("identity"),
    );
    headers.remove(http::header::RANGE);
    headers.remove(http::header::IF_RANGE);
}

/// `response` with every one of `secrets` replaced in its headers, body and trailers; refused
/// when its body is encoded or partial, where a credential's bytes need not appear as such.
pub(super) fn response(
    response: http::Response<WasiBody>,
    secrets: Vec<Secret>,
) -> Result<http::Response<WasiBody>, String> {
    if secrets.is_empty() {
        return Ok(response);
    }
    let encoded = response
        .headers()
        .get_all(http::header::CONTENT_ENCODING)
        .iter()
        .any(|value| !value.as_bytes().eq_ignore_ascii_case(b"identity"));
    if encoded {
        return Err(
            "its answer to a request carrying a credential came encoded (Content-Encoding), \
             where the credential could not be taken out of it"
                .into(),
        );
    }
    if response.status() == http::StatusCode::PARTIAL_CONTENT {
        return Err(
            "its answer to a request carrying a credential came in part (206), where the \
             credential could not be taken out of it"
                .into(),
        );
    }
    let (mut parts, body) = response.into_parts();
    let redactor = Redactor::new(secrets);
    redactor.headers(&mut parts.headers);
    Ok(http::Response::from_parts(parts, redactor.body(body)))
}

/// Replaces credentials in a stream of bytes, holding back the few bytes at the end of each
/// chunk that could be the start of one completed by the next chunk.
struct Redactor {
    secrets: Vec<Secret>,
    held: Vec<u8>,
    /// The most bytes held back: one less than the longest credential.
    keep: usize,
}

impl Redactor {
    fn new(mut secrets: Vec<Secret>) -> Self {
        // The longest first: a token inside a whole `Bearer TOKEN` value goes with it.
        secrets.sort_by_key(|s| std::cmp::Reverse(s.0.len()));
        secrets.dedup();
        let keep = secrets.first().map_or(0, |s| s.0.len() - 1);
        Self {
            secrets,
            held: Vec::new(),
            keep,
        }
    }

    fn headers(&self, headers: &mut http::HeaderMap) {
        for value in headers.values_mut() {
            if let Some(clean) = self.replaced(value.as_bytes()) {
                *value = HeaderValue::from_bytes(&clean)
                    .unwrap_or_else(|_| HeaderValue::from_static("[redacted]"));
            }
        }
    }

    /// `text` with every credential replaced, or `None` when it holds none.
    fn replaced(&self, text: &[u8]) -> Option<Vec<u8>> {
        let mut out = text.to_vec();
        let mut changed = false;
        for secret in &self.secrets {
            let mut at = 0;
            while let Some(found) = find(&out[at..], &secret.0) {
                let start = at + found;
                out.splice(start..start + secret.0.len(), REDACTED.iter().copied());
                at = start + REDACTED.len();
                changed = true;
            }
        }
        changed.then_some(out)
    }

    /// The bytes of `chunk` (with those held back before) that can go on now.
    fn push(&mut self, chunk: &[u8]) -> Bytes {
        self.held.extend_from_slice(chunk);
        if let Some(clean) = self.replaced(&self.held) {
            self.held = clean;
        }
        let ready = self.held.len().saturating_sub(self.keep);
        Bytes::from(self.held.drain(..ready).collect::<Vec<u8>>())
    }

    /// The bytes still held back, at the end of the body.
    fn finish(&mut self) -> Bytes {
        Bytes::from(std::mem::take(&mut self.held))
    }

    fn body(self, body: WasiBody) -> WasiBody {
        struct State {
            body: WasiBody,
            redactor: Redactor,
            /// Trailers, sent after the bytes held back.
            trailers: Option<http::HeaderMap>,
            done: bool,
        }
        let state = State {
            body,
            redactor: self,
            trailers: None,
            done: false,
        };
        let frames = futures_util::stream::unfold(state, |mut state| async move {
            if let Some(trailers) = state.trailers.take() {
                return Some((Ok(Frame::trailers(trailers)), state));
            }
            if state.done {
                return None;
            }
            loop {
                match state.body.frame().await {
                    Some(Ok(frame)) => match frame.into_data() {
                        Ok(data) => {
                            let ready = state.redactor.push(&data);
                            if !ready.is_empty() {
                                return Some((Ok(Frame::data(ready)), state));
                            }
                        }
                        Err(frame) => {
                            let Ok(mut trailers) = frame.into_trailers() else {
                                continue;
                            };
                            state.redactor.headers(&mut trailers);
                            state.trailers = Some(trailers);
                            state.done = true;
                            let rest = state.redactor.finish();
                            return Some((Ok(Frame::data(rest)), state));
                        }
                    },
                    Some(Err(error)) => {
                        state.done = true;
                        return Some((Err(error), state));
                    }
                    None => {
                        state.done = true;
                        let rest = state.redactor.finish();
                        if rest.is_empty() {
                            return None;
                        }
                        return Some((Ok(Frame::data(rest)), state));
                    }
                }
            }
        });
        http_body_util::StreamBody::new(frames).boxed_unsync()
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secrets(values: &[&str]) -> Vec<Secret> {
        values
            .iter()
            .filter_map(|v| Secret::new(v.as_bytes().to_vec()))
            .collect()
    }

    /// What the guest reads of `chunks` sent one after another.
    fn streamed(values: &[&str], chunks: &[&str]) -> String {
        let mut redactor = Redactor::new(secrets(values));
        let mut out = Vec::new();
        for chunk in chunks {
            out.extend_from_slice(&redactor.push(chunk.as_bytes()));
        }
        out.extend_from_slice(&redactor.finish());
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn a_credential_is_replaced_wherever_it_falls_across_chunks() {
        let token = "tok-0123456789";
        let text = format!("{{\"authorization\": \"Bearer {token}\", \"again\": \"{token}\"}}");
        let want = "{\"authorization\": \"Bearer [redacted]\", \"again\": \"[redacted]\"}";
        for size in 1..=text.len() {
            let chunks: Vec<String> = text
                .as_bytes()
                .chunks(size)
                .map(|c| String::from_utf8(c.to_vec()).unwrap())
                .collect();
            let chunks: Vec<&str> = chunks.iter().map(String::as_str).collect();
            assert_eq!(streamed(&[token], &chunks), want, "chunks of {size}");
        }
    }

    #[test]
    fn a_whole_header_value_goes_before_its_token() {
        let found = Secret::of_header(b"Bearer tok-0123456789");
        assert_eq!(found.len(), 2);
        assert_eq!(
            streamed(
                &["Bearer tok-0123456789", "tok-0123456789"],
                &["a Bearer tok-0123456789 b"]
            ),
            "a [redacted] b"
        );
    }

    #[test]
    fn short_values_are_not_looked_for() {
        assert!(Secret::new(b"1234567".to_vec()).is_none());
        assert!(Secret::of_header(b"Key abc").is_empty());
        assert_eq!(streamed(&["abc"], &["abc abc"]), "abc abc");
    }

    #[test]
    fn headers_are_redacted_too() {
        let redactor = Redactor::new(secrets(&["tok-0123456789"]));
        let mut headers = http::HeaderMap::new();
        headers.insert("x-echo", HeaderValue::from_static("Bearer tok-0123456789"));
        headers.insert("content-type", HeaderValue::from_static("text/plain"));
        redactor.headers(&mut headers);
        assert_eq!(headers["x-echo"], "Bearer [redacted]");
        assert_eq!(headers["content-type"], "text/plain");
    }

    #[tokio::test]
    async fn a_body_and_its_trailers_come_out_redacted() {
        let token = "tok-0123456789";
        let frames = vec![
            Ok::<_, wasmtime_wasi_http::Error>(Frame::data(Bytes::from("echo: tok-01"))),
            Ok(Frame::data(Bytes::from("23456789!"))),
            Ok(Frame::trailers({
                let mut t = http::HeaderMap::new();
                t.insert("x-token", HeaderValue::from_static("tok-0123456789"));
                t
            })),
        ];
        let body =
            http_body_util::StreamBody::new(futures_util::stream::iter(frames)).boxed_unsync();
        let body = Redactor::new(secrets(&[token])).body(body);
        let collected = body.collect().await.unwrap();
        let trailers = collected.trailers().cloned().unwrap();
        assert_eq!(collected.to_bytes(), "echo: [redacted]!");
        assert_eq!(trailers["x-token"], "[redacted]");
    }
}
