//! `GET /oauth/callback`: where a caller's browser comes back from consenting at an upstream's
//! authorization server (`[credentials.NAME] consent`). It needs no bearer token: the `state`
//! moat made for one principal is the proof, good once and for ten minutes, and the PKCE
//! verifier that makes the code worth anything never left moat.

use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use crate::mcp::catalogue::Catalogue;

#[derive(Deserialize)]
pub struct Callback {
    state: Option<String>,
    code: Option<String>,
    error: Option<String>,
    error_description: Option<String>,
}

pub async fn callback(
    State(catalogue): State<Catalogue>,
    Query(query): Query<Callback>,
) -> Response {
    let Some(broker) = catalogue.credentials() else {
        return page(
            StatusCode::NOT_FOUND,
            "Nothing to connect",
            "This moat asks no consent.",
        );
    };
    if let Some(error) = &query.error {
        let why = query.error_description.as_deref().unwrap_or(error);
        return page(
            StatusCode::BAD_REQUEST,
            "Not connected",
            &format!("The authorization server said: {why}. Call the tool again to retry."),
        );
    }
    let (Some(state), Some(code)) = (&query.state, &query.code) else {
        return page(
            StatusCode::BAD_REQUEST,
            "Not connected",
            "This address lacks the `state` and `code` an authorization server sends back.",
        );
    };
    match broker.complete_consent(state, code).await {
        Ok((source, principal)) => {
            tracing::info!(source, principal, "a caller connected their account");
            page(
                StatusCode::OK,
                "Connected",
                &format!(
                    "Your account for \"{source}\" is connected. You can close this window and go \
                     back to your conversation."
                ),
            )
        }
        Err(why) => {
            tracing::warn!("a consent callback was refused: {why}");
            page(StatusCode::BAD_REQUEST, "Not connected", &format!("{why}."))
        }
    }
}

/// A small HTML page for the person in the browser.
fn page(status: StatusCode, title: &str, text: &str) -> Response {
    let escape = |s: &str| {
        s.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('"', "&quot;")
    };
    let body = format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>moat: {}</title></head>\
         <body><h1>{}</h1><p id=\"message\">{}</p></body></html>\n",
        escape(title),
        escape(title),
        escape(text)
    );
    (
        status,
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
            (header::REFERRER_POLICY, "no-referrer"),
        ],
        body,
    )
        .into_response()
}
