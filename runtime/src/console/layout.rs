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

/// A page with only a message (and, to sign in, its link).
fn bare(title: &str, message: &str, sign_in: bool) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { (title) " · moat console" }
                link rel="icon" href="/console/assets/favicon.svg" type="image/svg+xml";
                link rel="stylesheet" href="/console/assets/console.css";
            }
            body {
                main.bare {
                    h1 { (title) }
                    p #message { (message) }
                    @if sign_in {
                        p { a #sign-in href="/console/sign-in" { "Sign in" } }
                    }
                }
            }
        }
    }
}

/// Why a page is not shown, as a page.
#[derive(Debug)]
pub struct Refusal {
    status: StatusCode,
    message: String,
}

impl Refusal {
    pub fn new(status: StatusCode, message: &str) -> Self {
        Self {
            status,
            message: message.to_string(),
        }
    }

    pub fn sign_in() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "Sign in to see this moat's console, or run `moat console` on its machine for a \
             one-time link.",
        )
    }

    pub fn unavailable(why: impl std::fmt::Display) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, &why.to_string())
    }

    pub fn not_found(what: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            &format!("{what} is not served here."),
        )
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let title = match self.status {
            StatusCode::UNAUTHORIZED => "Sign in",
            StatusCode::FORBIDDEN => "Forbidden",
            StatusCode::NOT_FOUND => "Not found",
            _ => "Not done",
        };
        let sign_in = self.status == StatusCode::UNAUTHORIZED;
        (self.status, bare(title, &self.message, sign_in)).into_response()
    }
}

/// 303 to `location`.
pub fn see_other(location: &str) -> Response {
    (StatusCode::SEE_OTHER, [(header::LOCATION, location)]).into_response()
}

/// A page that moves on to `location` by itself (a same-site navigation), with a link.
pub fn moving_on(location: &str) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta http-equiv="refresh" content=(format!("0;url={location}"));
                title { "Signed in · moat console" }
                link rel="icon" href="/console/assets/favicon.svg" type="image/svg+xml";
                link rel="stylesheet" href="/console/assets/console.css";
            }
            body { main.bare { p { "Signed in. " a href=(location) { "Go on to the console" } } } }
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
