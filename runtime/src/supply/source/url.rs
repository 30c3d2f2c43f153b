//! Components at `https://` URLs (`http://` only on loopback hosts), downloaded once and then
//! revalidated with the server's `ETag` or `Last-Modified`.

use anyhow::{Context, Result, bail};
use futures_util::StreamExt;
use reqwest::header::{ETAG, IF_MODIFIED_SINCE, IF_NONE_MATCH, LAST_MODIFIED};
use reqwest::{StatusCode, Url};

use super::store::UrlRecord;
use super::{Digest, Fetched, MAX_COMPONENT_BYTES, Progress, Store, check_component, is_loopback};

/// Refuses a scheme other than `https`, and `http` to any host but this machine.
pub(super) fn check_scheme(url: &Url) -> Result<()> {
    match url.scheme() {
        "https" => Ok(()),
        "http" if url.host_str().is_some_and(is_loopback) => Ok(()),
        "http" => bail!(
            "{url}: plain http is allowed only to loopback hosts (localhost, 127.0.0.0/8, [::1]); \
             use https"
        ),
        other => bail!("{url}: unsupported scheme \"{other}\""),
    }
}

/// Redirects are followed (at most 5) only as [`check_redirect`] allows.
pub(super) fn redirect_policy() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        match check_redirect(attempt.previous(), attempt.url()) {
            Ok(()) => attempt.follow(),
            Err(error) => attempt.error(error),
        }
    })
}

/// Whether a redirect to `next` may be followed after `previous` (the URLs asked so far): at most
/// 5, each to a URL [`check_scheme`] allows, and once the chain has been `https` it stays
/// `https`, so an `https` source is never served over plain HTTP, not even from loopback.
pub(super) fn check_redirect(previous: &[Url], next: &Url) -> Result<(), String> {
    if previous.len() >= 5 {
        return Err("more than 5 redirects".into());
    }
    if let Err(error) = check_scheme(next) {
        return Err(format!("refusing the redirect: {error:#}"));
    }
    if next.scheme() != "https"
        && let Some(secure) = previous.iter().find(|url| url.scheme() == "https")
    {
        return Err(format!(
            "refusing the redirect from {secure} (https) to {next}: an https source is never \
             followed to plain http"
        ));
    }
    Ok(())
}

/// Downloads `url`, or revalidates the copy in `store` and uses it while the server says it has
/// not changed. When the server cannot be reached, a stored copy is used with a warning.
pub(super) async fn fetch(
    http: &reqwest::Client,
    store: Option<&Store>,
    url: &Url,
    progress: &Progress,
) -> Result<Fetched> {
    let key = url.as_str();
    let cached = store.and_then(|store| {
        let record = store.url_record(key)?;
        let wasm = store.blob(&record.digest)?;
        Some((record, wasm))
    });
    let mut request = http.get(url.clone());
    if let Some((record, _)) = &cached {
        if let Some(etag) = &record.etag {
            request = request.header(IF_NONE_MATCH, etag);
        }
        if let Some(modified) = &record.last_modified {
            request = request.header(IF_MODIFIED_SINCE, modified);
        }
    }
    let response = match request.send().await {
        Ok(response) => response,
        Err(error) => {
            let Some((record, wasm)) = cached else {
                let failure = failure(url, &error);
                return Err(error).context(format!("{url}: {failure}"));
            };
            tracing::warn!(
                "{url}: cannot revalidate ({error}); using the copy downloaded before, {}",
                record.digest
            );
            return Ok(Fetched {
                wasm,
                digest: record.digest,
                origin: format!("{url} (kept copy; the server was unreachable)"),
                signature: None,
            });
        }
    };
    let status = response.status();
    if status == StatusCode::NOT_MODIFIED {
        if let Some((record, wasm)) = cached {
            return Ok(Fetched {
                wasm,
                digest: record.digest,
                origin: format!("{url} (unchanged since the last download)"),
                signature: None,
            });
        }
        bail!("{url}: the server answered 304 Not Modified to a request that was not conditional");
    }
    if !status.is_success() {
        let reason = match status {
            StatusCode::NOT_FOUND => "not found",
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => "access denied",
            _ => "the download failed",
        };
        bail!("{url}: {reason} (HTTP {status})");
    }
    if let Some(length) = response.content_length()
        && length > MAX_COMPONENT_BYTES
    {
        bail!(
            "{url}: {length} bytes is more than the {MAX_COMPONENT_BYTES} bytes a plugin may have"
        );
    }
    let header = |name| {
        response
            .headers()
            .get(name)
            .and_then(|v: &reqwest::header::HeaderValue| v.to_str().ok())
            .map(str::to_string)
    };
    let (etag, last_modified) = (header(ETAG), header(LAST_MODIFIED));

    let bar = progress.download(url.as_str(), response.content_length());
    let mut wasm = Vec::new();
    let mut hasher = Digest::hasher();
    let mut body = response.bytes_stream();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.with_context(|| format!("{url}: the download broke off"))?;
        if (wasm.len() + chunk.len()) as u64 > MAX_COMPONENT_BYTES {
            bail!("{url}: more than the {MAX_COMPONENT_BYTES} bytes a plugin may have");
        }
        hasher.update(&chunk);
        wasm.extend_from_slice(&chunk);
        bar.inc(chunk.len() as u64);
    }
    bar.finish_and_clear();
    check_component(&wasm).with_context(|| url.to_string())?;
    let digest = hasher.finish();

    if let Some(store) = store {
        let record = UrlRecord {
            url: key.to_string(),
            digest,
            etag,
            last_modified,
        };
        if let Err(error) = store
            .put_blob(&digest, &wasm)
            .and_then(|()| store.put_url_record(&record))
        {
            tracing::warn!("{url}: the download could not be kept: {error:#}");
        }
    }
    Ok(Fetched {
        wasm,
        digest,
        origin: url.to_string(),
        signature: None,
    })
}

/// The longest signature file moat reads: a minisign signature with a long trusted comment.
const MAX_SIGNATURE_BYTES: usize = 16 << 10;

/// The publisher's signature of the component at `url` (whose sha256 is `digest`), published
/// beside it as `URL.minisig`. None when the server has none (404 or 410); when it cannot be
/// asked, the one kept from the last download of the same bytes, with a warning.
pub(super) async fn fetch_signature(
    http: &reqwest::Client,
    store: Option<&Store>,
    url: &Url,
    digest: &Digest,
) -> Option<String> {
    let mut signature_url = url.clone();
    signature_url.set_path(&format!("{}.minisig", url.path()));
    match download_signature(http, &signature_url).await {
        Ok(Some(text)) => {
            if let Some(store) = store
                && let Err(error) = store.put_signature(digest, &text)
            {
                tracing::warn!("{signature_url}: the signature could not be kept: {error:#}");
            }
            Some(text)
        }
        Ok(None) => None,
        Err(error) => {
            let kept = store.and_then(|store| store.signature(digest));
            let using = if kept.is_some() {
                "using the one kept from before"
            } else {
                "none kept"
            };
            tracing::warn!("{signature_url}: {error:#}; {using}");
            kept
        }
    }
}

async fn download_signature(http: &reqwest::Client, url: &Url) -> Result<Option<String>> {
    let response = http.get(url.clone()).send().await.map_err(|error| {
        let failure = failure(url, &error);
        anyhow::Error::new(error).context(failure)
    })?;
    match response.status() {
        StatusCode::NOT_FOUND | StatusCode::GONE => return Ok(None),
        status if !status.is_success() => {
            bail!("the signature could not be fetched (HTTP {status})")
        }
        _ => {}
    }
    if response
        .content_length()
        .is_some_and(|n| n > MAX_SIGNATURE_BYTES as u64)
    {
        bail!("the signature is over {MAX_SIGNATURE_BYTES} bytes");
    }
    let mut text = Vec::new();
    let mut body = response.bytes_stream();
    while let Some(chunk) = body.next().await {
        text.extend_from_slice(&chunk.context("the download broke off")?);
        if text.len() > MAX_SIGNATURE_BYTES {
            bail!("the signature is over {MAX_SIGNATURE_BYTES} bytes");
        }
    }
    String::from_utf8(text)
        .map(Some)
        .context("the signature is not text")
}

/// What kept a request from getting an answer: the server's TLS certificate, or the server.
fn failure(url: &Url, error: &reqwest::Error) -> String {
    match tls_error(error) {
        Some(tls) => format!(
            "the TLS certificate of {} is not trusted ({tls})",
            host_of(url)
        ),
        None => format!("cannot reach {}", host_of(url)),
    }
}

/// The TLS error among the causes of `error`, if there is one.
fn tls_error<'a>(mut error: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    loop {
        if let Some(tls) = error.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        // An I/O error's `source()` skips the error it wraps.
        error = match error
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            Some(wrapped) => wrapped,
            None => error.source()?,
        };
    }
}

fn host_of(url: &Url) -> String {
    match (url.host_str(), url.port()) {
        (Some(host), Some(port)) => format!("{host}:{port}"),
        (Some(host), None) => host.to_string(),
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn urls(list: &[&str]) -> Vec<Url> {
        list.iter().map(|u| Url::parse(u).unwrap()).collect()
    }

    #[test]
    fn a_redirect_never_leaves_https() {
        let to = |u: &str| Url::parse(u).unwrap();
        let https = urls(&["https://example.com/a.wasm"]);
        let error = check_redirect(&https, &to("http://127.0.0.1:8000/a.wasm")).unwrap_err();
        assert!(error.contains("never followed to plain http"), "{error}");
        // Not even after a hop back to loopback http.
        let mixed = urls(&["https://example.com/a.wasm", "http://localhost/b.wasm"]);
        assert!(check_redirect(&mixed, &to("http://localhost/c.wasm")).is_err());
        assert!(check_redirect(&https, &to("https://cdn.example.com/a.wasm")).is_ok());
        // Loopback http may go to loopback http or up to https.
        let plain = urls(&["http://127.0.0.1:8000/a.wasm"]);
        assert!(check_redirect(&plain, &to("http://localhost:9000/a.wasm")).is_ok());
        assert!(check_redirect(&plain, &to("https://example.com/a.wasm")).is_ok());
        assert!(check_redirect(&plain, &to("http://example.com/a.wasm")).is_err());
        let six = urls(&["https://example.com/"; 5]);
        assert!(check_redirect(&six, &to("https://example.com/")).is_err());
    }
}
