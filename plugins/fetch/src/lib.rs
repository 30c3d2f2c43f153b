//! The `fetch` plugin: GETs a URL over `wasi:http` and returns its text, HTML as Markdown, one
//! bounded slice at a time.

use moat_guest::http;
use url::Url;

moat_guest::generate!("fetch");

use exports::moat::fetch::tools::{Guest, Page};

/// The most bytes of a body read from the network; the rest is dropped.
const MAX_DOWNLOAD: usize = 5 << 20;
const DEFAULT_LENGTH: u32 = 5000;
const MAX_LENGTH: u32 = 1_000_000;
const MAX_REDIRECTS: usize = 5;

struct Fetch;

impl Guest for Fetch {
    fn fetch(
        url: String,
        max_length: Option<u32>,
        start_index: Option<u32>,
        raw: Option<bool>,
    ) -> Result<Page, String> {
        let max_length = max_length.unwrap_or(DEFAULT_LENGTH);
        if max_length == 0 || max_length > MAX_LENGTH {
            return Err(format!("max-length must be from 1 to {MAX_LENGTH}"));
        }
        let (url, response) = get_following_redirects(&url)?;
        if response.status >= 400 {
            return Err(format!("{url} answered HTTP {}", response.status));
        }
        let content_type = response.header("content-type").map(str::to_string);
        let essence = content_type
            .as_deref()
            .and_then(|t| t.split(';').next())
            .map(|t| t.trim().to_ascii_lowercase());
        let body = String::from_utf8_lossy(&response.body);
        let is_html = match essence.as_deref() {
            Some("text/html" | "application/xhtml+xml") => true,
            Some(t) if is_text(t) => false,
            Some(other) => return Err(format!("{url} is {other}, not text")),
            None => looks_like_html(&body),
        };
        let mut text = if is_html && !raw.unwrap_or(false) {
            htmd::convert(&body).map_err(|e| format!("converting the HTML failed: {e}"))?
        } else {
            body.into_owned()
        };
        if response.truncated {
            text.push_str(&format!(
                "\n\n[the body was cut at {} MiB]",
                MAX_DOWNLOAD >> 20
            ));
        }
        let total = text.chars().count() as u32;
        let start = start_index.unwrap_or(0);
        if start > 0 && start >= total {
            return Err(format!(
                "start-index {start} is past the end: the page has {total} characters"
            ));
        }
        let content: String = text
            .chars()
            .skip(start as usize)
            .take(max_length as usize)
            .collect();
        let end = start + content.chars().count() as u32;
        Ok(Page {
            url: url.to_string(),
            status: response.status,
            content_type,
            content,
            total_length: total,
            next_index: (end < total).then_some(end),
        })
    }
}

/// GETs `url`, following redirects; returns the final URL and its response.
fn get_following_redirects(url: &str) -> Result<(Url, http::Response), String> {
    let mut url = Url::parse(url).map_err(|e| format!("`{url}` is not a URL: {e}"))?;
    for _ in 0..=MAX_REDIRECTS {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!("`{url}` is not an http:// or https:// URL"));
        }
        let response = http::get(
            url.as_str(),
            &[
                ("user-agent", "moat-fetch/0.1"),
                ("accept", "text/html, text/*;q=0.9, */*;q=0.5"),
            ],
            MAX_DOWNLOAD,
        )
        .map_err(|e| format!("fetching {url}: {e}"))?;
        if !(300..400).contains(&response.status) || response.status == 304 {
            return Ok((url, response));
        }
        let location = response.header("location").ok_or_else(|| {
            format!(
                "{url} redirected (HTTP {}) without a Location",
                response.status
            )
        })?;
        url = url
            .join(location)
            .map_err(|e| format!("{url} redirected to `{location}`, not a URL: {e}"))?;
    }
    Err(format!("more than {MAX_REDIRECTS} redirects"))
}

fn is_text(essence: &str) -> bool {
    essence.starts_with("text/")
        || essence.ends_with("+json")
        || essence.ends_with("+xml")
        || matches!(
            essence,
            "application/json" | "application/xml" | "application/javascript"
        )
}

fn looks_like_html(body: &str) -> bool {
    let start = body
        .trim_start()
        .get(..15)
        .unwrap_or("")
        .to_ascii_lowercase();
    start.starts_with("<!doctype html") || start.starts_with("<html")
}

export!(Fetch);
