//! The `fetch` plugin: GETs a URL over `wasi:http` and returns its text, HTML as Markdown, one
//! bounded slice at a time, as a text content block (and a second block that says where it came
//! from and where the next slice starts).

use std::sync::{Arc, Mutex};

use htmd::element_handler::{HandlerResult, Handlers};
use htmd::{Element, HtmlToMarkdown};
use moat_guest::http;
use url::Url;

moat_guest::generate!("fetch");

use exports::moat::fetch::tools::Guest;
use moat::plugin::content::ContentBlock;

/// The most bytes of a body read from the network; the rest is dropped.
const MAX_DOWNLOAD: usize = 5 << 20;
const DEFAULT_LENGTH: u32 = 5000;
const MAX_LENGTH: u32 = 1_000_000;
const MAX_REDIRECTS: usize = 5;
/// Elements whose contents a reader of the page never sees as text.
const HIDDEN: [&str; 4] = ["script", "style", "noscript", "template"];

struct Fetch;

impl Guest for Fetch {
    fn fetch(
        url: String,
        max_length: Option<u32>,
        start_index: Option<u32>,
        raw: Option<bool>,
    ) -> Result<Vec<ContentBlock>, String> {
        // moat checks the schema's bounds before the call; these stand in case it did not.
        let max_length = max_length.unwrap_or(DEFAULT_LENGTH);
        if max_length == 0 || max_length > MAX_LENGTH {
            return Err(format!(
                "max-length must be from 1 to {MAX_LENGTH}, not {max_length}"
            ));
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
            to_markdown(&body, &url)?
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
        let about = about(
            &url,
            response.status,
            content_type.as_deref(),
            start,
            end,
            total,
        );
        Ok(vec![ContentBlock::Text(content), ContentBlock::Text(about)])
    }
}

/// The second block: where the text came from, and where the next slice starts.
fn about(
    url: &Url,
    status: u16,
    content_type: Option<&str>,
    start: u32,
    end: u32,
    total: u32,
) -> String {
    let kind = content_type.unwrap_or("no Content-Type");
    let head = format!("Fetched {url} (HTTP {status}, {kind}):");
    if start == 0 && end == total {
        format!("{head} the whole text, {total} characters.")
    } else if end < total {
        format!(
            "{head} characters {start} to {end} of {total}. The text goes on: to read on, call \
             again with the same URL and the start index {end}."
        )
    } else {
        format!("{head} characters {start} to {end} of {total}, the end of the text.")
    }
}

/// `html` as Markdown, without the elements a reader does not see, with links and images
/// resolved against the page's URL (or its `<base href>`).
fn to_markdown(html: &str, page: &Url) -> Result<String, String> {
    let base = Arc::new(Mutex::new(Base {
        url: page.clone(),
        set: false,
    }));
    let (for_base, for_links, for_images) = (base.clone(), base.clone(), base);
    let converter = HtmlToMarkdown::builder()
        .skip_tags(HIDDEN.to_vec())
        .add_handler(vec!["base"], move |_: &dyn Handlers, element: Element| {
            let mut base = for_base.lock().unwrap_or_else(|e| e.into_inner());
            if !base.set
                && let Some(href) = attribute(&element, "href")
                && let Ok(url) = base.url.join(href.trim())
            {
                base.url = url;
                base.set = true;
            }
            None
        })
        .add_handler(
            vec!["a"],
            move |handlers: &dyn Handlers, element: Element| {
                let text = handlers.walk_children(element.node).content;
                let link = attribute(&element, "href").and_then(|href| resolve(&for_links, href));
                let Some(link) = link else {
                    return Some(text.into());
                };
                Some(anchor(&text, &link, attribute(&element, "title")).into())
            },
        )
        .add_handler(vec!["img"], move |_: &dyn Handlers, element: Element| {
            let alt = one_line(attribute(&element, "alt").unwrap_or_default());
            let source = attribute(&element, "src").and_then(|src| resolve(&for_images, src));
            let result: HandlerResult = match source {
                Some(source) => {
                    let title = title_part(attribute(&element, "title"));
                    format!("![{alt}]({}{title})", destination(&source)).into()
                }
                // An inline image (`data:`) is no use as text, and can be megabytes long.
                None => alt.into(),
            };
            Some(result)
        })
        .build();
    converter
        .convert(html)
        .map_err(|e| format!("converting the HTML failed: {e}"))
}

/// The URL links are resolved against, and whether a `<base href>` has set it.
struct Base {
    url: Url,
    set: bool,
}

/// The value of attribute `name` of `element`.
fn attribute<'a>(element: &'a Element, name: &str) -> Option<&'a str> {
    element
        .attrs
        .iter()
        .find(|a| &*a.name.local == name)
        .map(|a| &*a.value)
}

/// `link` made absolute; `None` for a link that is no place to go (`javascript:`, `data:`).
fn resolve(base: &Mutex<Base>, link: &str) -> Option<String> {
    let link = link.trim();
    let base = base.lock().unwrap_or_else(|e| e.into_inner());
    match base.url.join(link) {
        Ok(url) if matches!(url.scheme(), "javascript" | "data" | "vbscript") => None,
        Ok(url) => Some(url.to_string()),
        // Not a URL even relative to the page: left as the page wrote it.
        Err(_) => Some(link.to_string()),
    }
}

/// A Markdown link, with the whitespace around its text kept outside the brackets.
fn anchor(text: &str, link: &str, title: Option<&str>) -> String {
    let inner = text.trim();
    let leading = &text[..text.len() - text.trim_start().len()];
    let trailing = &text[text.trim_end().len().max(leading.len())..];
    let title = title_part(title);
    if inner.is_empty() && title.is_empty() && !link.contains([' ', '<', '>']) {
        // A link without text (an icon): its URL is all there is to show.
        return format!("{leading}<{link}>{trailing}");
    }
    format!("{leading}[{inner}]({}{title}){trailing}", destination(link))
}

/// A link destination as Markdown reads it: parentheses escaped, in `<>` when it holds spaces.
fn destination(link: &str) -> String {
    let escaped = link.replace('(', "\\(").replace(')', "\\)");
    if escaped.contains(' ') {
        format!("<{escaped}>")
    } else {
        escaped
    }
}

/// ` "title"` for a link or image that has one, else nothing.
fn title_part(title: Option<&str>) -> String {
    match title.map(one_line) {
        Some(title) if !title.is_empty() => format!(" \"{}\"", title.replace('"', "\\\"")),
        _ => String::new(),
    }
}

/// `text` on one line, its runs of whitespace single spaces.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
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
