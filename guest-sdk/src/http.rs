//! A blocking HTTP client over `wasi:http` (feature `http`), for tools that fetch something.
//!
//! moat sends the request only where the operator granted the host; otherwise the request fails
//! with [`ErrorCode::HttpRequestDenied`] and moat reports the denial to the client itself.
//! Redirects are not followed: a tool that follows one makes a new request, checked anew.

use wasip2::http::outgoing_handler;
pub use wasip2::http::types::Method;
use wasip2::http::types::{ErrorCode, Fields, OutgoingRequest, Scheme};
use wasip2::io::streams::StreamError;

/// What came back.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    /// Header names in lowercase, values as text (lossily).
    pub headers: Vec<(String, String)>,
    /// The body, cut at the limit the request named.
    pub body: Vec<u8>,
    /// Whether the body went on past that limit.
    pub truncated: bool,
}

impl Response {
    /// The first value of header `name` (lowercase).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// GETs `url` (`http://` or `https://`), reading at most `max_body` bytes of the body.
/// `headers` are added to the request.
pub fn get(url: &str, headers: &[(&str, &str)], max_body: usize) -> Result<Response, String> {
    request(Method::Get, url, headers, max_body)
}

/// Sends a request with `method` and no body to `url`, as [`get`] does.
pub fn request(
    method: Method,
    url: &str,
    headers: &[(&str, &str)],
    max_body: usize,
) -> Result<Response, String> {
    let (scheme, rest) = match url.split_once("://") {
        Some((s, rest)) if s.eq_ignore_ascii_case("http") => (Scheme::Http, rest),
        Some((s, rest)) if s.eq_ignore_ascii_case("https") => (Scheme::Https, rest),
        _ => return Err(format!("`{url}` is not an http:// or https:// URL")),
    };
    let rest = rest.split('#').next().unwrap_or_default();
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    if authority.is_empty() {
        return Err(format!("`{url}` names no host"));
    }
    let path = match path {
        "" => "/".to_string(),
        p if p.starts_with('?') => format!("/{p}"),
        p => p.to_string(),
    };

    let fields = Fields::new();
    for (name, value) in headers {
        fields
            .append(name, value.as_bytes())
            .map_err(|e| format!("header {name}: {e:?}"))?;
    }
    let request = OutgoingRequest::new(fields);
    let invalid = |what: &str| format!("`{url}`: invalid {what}");
    request
        .set_method(&method)
        .map_err(|()| invalid("method"))?;
    request
        .set_scheme(Some(&scheme))
        .map_err(|()| invalid("scheme"))?;
    request
        .set_authority(Some(authority))
        .map_err(|()| invalid("host"))?;
    request
        .set_path_with_query(Some(&path))
        .map_err(|()| invalid("path"))?;

    let pending = outgoing_handler::handle(request, None).map_err(describe)?;
    pending.subscribe().block();
    let response = match pending.get() {
        Some(Ok(Ok(response))) => response,
        Some(Ok(Err(code))) => return Err(describe(code)),
        Some(Err(())) | None => return Err("the response was lost".into()),
    };
    let status = response.status();
    let headers = response
        .headers()
        .entries()
        .into_iter()
        .map(|(name, value)| {
            (
                name.to_ascii_lowercase(),
                String::from_utf8_lossy(&value).into_owned(),
            )
        })
        .collect();
    let body = response
        .consume()
        .map_err(|()| "the body was already taken".to_string())?;
    let stream = body
        .stream()
        .map_err(|()| "the body stream was already taken".to_string())?;
    let mut bytes = Vec::new();
    let mut truncated = false;
    loop {
        match stream.blocking_read(64 * 1024) {
            Ok(chunk) => {
                bytes.extend_from_slice(&chunk);
                if bytes.len() > max_body {
                    bytes.truncate(max_body);
                    truncated = true;
                    break;
                }
            }
            Err(StreamError::Closed) => break,
            Err(StreamError::LastOperationFailed(e)) => {
                return Err(format!("reading the body failed: {}", e.to_debug_string()));
            }
        }
    }
    Ok(Response {
        status,
        headers,
        body: bytes,
        truncated,
    })
}

/// An error code in words.
fn describe(code: ErrorCode) -> String {
    match code {
        // moat adds its reason to the call's error (no grant covers the address, a credential
        // the caller has not given): the guest is not told which.
        ErrorCode::HttpRequestDenied => "the host denied the request".into(),
        ErrorCode::DnsError(e) => format!("DNS lookup failed: {}", e.rcode.unwrap_or_default()),
        ErrorCode::ConnectionRefused => "the connection was refused".into(),
        ErrorCode::ConnectionTimeout => "the connection timed out".into(),
        ErrorCode::TlsCertificateError => "the server's TLS certificate is not valid".into(),
        other => format!("the request failed: {other:?}"),
    }
}
