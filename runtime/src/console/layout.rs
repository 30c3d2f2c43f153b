//! The frame every console page shares, the pages that say why not, and the assets, all from
//! the binary.

use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use maud::{DOCTYPE, Markup, html};

use super::session::Operator;

const CSS: &str = include_str!("assets/console.css");
const JS: &str = include_str!("assets/console.js");
const ICON: &str = include_str!("assets/favicon.svg");

/// The pages of the navigation, by path and name.
const NAV: [(&str, &str); 7] = [
    ("/console/", "Overview"),
    ("/console/plugins", "Plugins"),
    ("/console/callers", "Callers"),
    ("/console/live", "Live calls"),
    ("/console/audit", "Audit"),
    ("/console/credentials", "Credentials"),
    ("/console/config", "Configuration"),
];

/// A console page: the navigation with `current` marked, the operator, and `body`.
pub fn frame(operator: &Operator, current: &str, title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · moat console" }
                link rel="icon" href="/console/assets/favicon.svg" type="image/svg+xml";
                link rel="stylesheet" href="/console/assets/console.css";
                script src="/console/assets/console.js" defer {}
            }
            body {
                header {
                    a.brand href="/console/" { "moat" }
                    nav aria-label="Console" {
                        ul {
                            @for (path, name) in NAV {
                                li {
                                    @if path == current {
                                        a href=(path) aria-current="page" { (name) }
                                    } @else {
                                        a href=(path) { (name) }
                                    }
                                }
                            }
                        }
                    }
                    form.sign-out method="post" action="/console/sign-out" {
                        span { "Signed in as " b #signed-in-as { (operator.principal.name) } }
                        input type="hidden" name="csrf" value=(operator.csrf);
                        button type="submit" { "Sign out" }
                    }
                }
                main { h1 { (title) } (body) }
            }
        }
    }
}

/// `GET /console/assets/{name}`.
pub async fn asset(Path(name): Path<String>) -> Response {
    let (body, kind) = match name.as_str() {
        "console.css" => (CSS, "text/css; charset=utf-8"),
        "console.js" => (JS, "text/javascript; charset=utf-8"),
        "favicon.svg" => (ICON, "image/svg+xml"),
        _ => return StatusCode::NOT_FOUND.into_response(),
    };
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("private, max-age=300"),
    );
    response
}

/// A JSON value, pretty, escaped for a `pre`.
pub fn json(value: &serde_json::Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default()
}

/// RFC 3339 of `time`, to the second.
pub fn when(time: std::time::SystemTime) -> String {
    jiff::Timestamp::try_from(time)
        .map(|t| t.round(jiff::Unit::Second).unwrap_or(t).to_string())
        .unwrap_or_default()
}
