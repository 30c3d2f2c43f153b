//! The answers that are not console pages: why a page is not shown, a redirect, the page that
//! moves a browser on once it is signed in. Each has only a message and the stylesheet.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use maud::{DOCTYPE, Markup, html};

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
