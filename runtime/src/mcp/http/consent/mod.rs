//! The pages a caller's browser goes through to connect their account at a third party
//! (`[credentials.NAME] consent`), served with MCP by `moat serve --http`:
//!
//! - `GET /oauth/consent/{link}`: the link a call elicited. It binds the browser with a
//!   cookie, then signs it in at moat's own authorization server (a link made for an OAuth
//!   caller) or asks it to confirm on a page naming the principal and the source (an API key,
//!   the local token, where the source opts in);
//! - `POST /oauth/consent/{link}`: that confirmation, with a token only that browser holds;
//! - `GET /oauth/signed-in`: back from signing in; goes on to the third party only when the
//!   sign-in names the principal the link was made for;
//! - `GET /oauth/callback/{source}`: back from the third party, in the same browser.
//!
//! None needs a bearer token: the browser proves itself as each step says
//! ([`crate::upstream::consent::steps`]). A stdio moat serves only the callback, on loopback
//! ([`Loopback`]).

use axum::Router;
use axum::extract::{Form, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::get;
use serde::Deserialize;

pub use self::loopback::Loopback;
use self::page::{bind, browser, confirmation, page, see_other, setting};
use super::Live;
use super::auth::Authentication;
use crate::mcp::catalogue::Catalogue;
use crate::upstream::Broker;
use crate::upstream::consent::steps::{browser_digest, confirmation_token, digest, pkce, random};
use crate::upstream::consent::{Answer, Proof, Step};

mod loopback;
mod page;
mod rate;

const USED: &str = "This link was used already, has expired, or was not made by this moat. Call \
                    the tool again for a new one.";

/// What the pages need: the credentials served, (over HTTP) the sign-in of the moment, and
/// how often each address has asked.
#[derive(Clone)]
pub struct Pages {
    catalogue: Catalogue,
    live: Option<Live>,
    rate: std::sync::Arc<rate::PerAddress>,
}

impl Pages {
    /// A stdio moat's: it signs no browser in.
    fn stdio(catalogue: Catalogue) -> Self {
        Self {
            catalogue,
            live: None,
            rate: Default::default(),
        }
    }

    fn broker(&self) -> Result<std::sync::Arc<Broker>, Stop> {
        self.catalogue
            .credentials()
            .ok_or_else(|| Stop(StatusCode::NOT_FOUND, "This moat asks no consent.".into()))
    }
}

/// Why a browser goes no further: the status, and what its page says.
struct Stop(StatusCode, String);

impl Stop {
    fn page(self) -> Response {
        not_connected(self.0, &self.1)
    }
}

/// The consent pages of `moat serve --http`.
pub fn routes(catalogue: Catalogue, live: Live) -> Router {
    let pages = Pages {
        catalogue,
        live: Some(live),
        rate: Default::default(),
    };
    Router::new()
        .route("/oauth/consent/{link}", get(open).post(confirm))
        .route("/oauth/signed-in", get(signed_in))
        .route("/oauth/callback/{source}", get(callback))
        .layer(axum::middleware::from_fn_with_state(pages.clone(), limit))
        .with_state(pages)
}

/// Turns away an address past its share of requests to these pages.
async fn limit(
    State(pages): State<Pages>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let trusted = pages
        .live
        .as_ref()
        .map(|live| live.gate().trusted_proxies.clone())
        .unwrap_or_default();
    if let Some(address) = super::auth::remote(&request, &trusted)
        && let Err(wait) = pages.rate.admit(address, std::time::Instant::now())
    {
        let mut page = not_connected(
            StatusCode::TOO_MANY_REQUESTS,
            "Too many requests from this address: wait a minute, then call the tool again.",
        );
        let seconds = axum::http::HeaderValue::from(wait.as_secs().max(1));
        page.headers_mut()
            .insert(axum::http::header::RETRY_AFTER, seconds);
        return page;
    }
    next.run(request).await
}

/// `GET /oauth/consent/{link}`.
async fn open(
    State(pages): State<Pages>,
    Path(link): Path<String>,
    headers: HeaderMap,
) -> Response {
    let broker = match pages.broker() {
        Ok(broker) => broker,
        Err(stop) => return stop.page(),
    };
    let Some(Step::Link {
        source,
        principal,
        proof,
    }) = broker.consents().peek(&link).await
    else {
        return not_connected(StatusCode::BAD_REQUEST, USED);
    };
    let Some(settings) = broker.consent_settings(&source) else {
        return not_connected(
            StatusCode::BAD_REQUEST,
            &format!("The credential source \"{source}\" is no longer configured."),
        );
    };
    let (cookie, set_cookie) = match bind(&headers) {
        Ok(bound) => bound,
        Err(why) => return not_connected(StatusCode::INTERNAL_SERVER_ERROR, &why),
    };
    match proof {
        Proof::Confirm => setting(
            confirmation(
                &link,
                &principal,
                &source,
                &confirmation_token(&cookie, &link),
            ),
            set_cookie,
        ),
        Proof::SignIn => {
            let redirect_uri = format!("{}/oauth/signed-in", settings.base());
            match sign_in(&pages, &link, &cookie, redirect_uri, &broker).await {
                Ok(url) => see_other(&url, set_cookie),
                Err(why) => not_connected(StatusCode::SERVICE_UNAVAILABLE, &why),
            }
        }
        Proof::Loopback => not_connected(StatusCode::BAD_REQUEST, USED),
    }
}

/// Where to sign the browser bound by `cookie` in, for `link`; the step that waits for it.
async fn sign_in(
    pages: &Pages,
    link: &str,
    cookie: &str,
    redirect_uri: String,
    broker: &Broker,
) -> Result<String, String> {
    let gate = pages.live.as_ref().map(Live::gate);
    let Some(Authentication::Required { authenticator, .. }) =
        gate.as_deref().map(|g| &g.authentication)
    else {
        return Err("this moat no longer signs anyone in with OAuth".into());
    };
    let oauth = authenticator
        .oauth()
        .ok_or("this moat no longer signs anyone in with OAuth")?;
    let state = random::<16>()?;
    let (verifier, challenge) = pkce()?;
    let url = oauth.sign_in_url(&redirect_uri, &state, &challenge).await?;
    let step = Step::SignIn {
        link: link.to_string(),
        verifier,
        browser: browser_digest(cookie),
        redirect_uri,
    };
    broker.consents().put(&state, &step).await?;
    Ok(url)
}

#[derive(Deserialize)]
struct Confirmation {
    token: String,
}

/// `POST /oauth/consent/{link}`: a confirmation from the browser the page was shown to.
async fn confirm(
    State(pages): State<Pages>,
    Path(link): Path<String>,
    headers: HeaderMap,
    Form(form): Form<Confirmation>,
) -> Response {
    let broker = match pages.broker() {
        Ok(broker) => broker,
        Err(stop) => return stop.page(),
    };
    // The token is made from the browser's own cookie: a form posted from another site, or
    // by another browser, does not carry it.
    let Some(cookie) = browser(&headers).filter(|c| confirmation_token(c, &link) == form.token)
    else {
        return not_connected(
            StatusCode::FORBIDDEN,
            "This confirmation did not come from the page this browser was shown.",
        );
    };
    let Some(Step::Link {
        source,
        principal,
        proof: Proof::Confirm,
    }) = broker.consents().take(&link).await
    else {
        return not_connected(StatusCode::BAD_REQUEST, USED);
    };
    tracing::info!(
        source,
        principal,
        link = digest(&link),
        "a browser confirmed a consent link"
    );
    match broker
        .send_upstream(&source, &principal, browser_digest(&cookie))
        .await
    {
        Ok(url) => see_other(&url, None),
        Err(why) => not_connected(StatusCode::BAD_REQUEST, &why),
    }
}

#[derive(Deserialize)]
pub struct Back {
    state: Option<String>,
    code: Option<String>,
    iss: Option<String>,
    error: Option<String>,
    error_description: Option<String>,
}

impl Back {
    /// The state and code, or the page saying why there are none.
    fn state_and_code(&self) -> Result<(&str, &str), Stop> {
        if let Some(error) = &self.error {
            let why = self.error_description.as_deref().unwrap_or(error);
            return Err(Stop(
                StatusCode::BAD_REQUEST,
                format!("The authorization server said: {why}. Call the tool again to retry."),
            ));
        }
        match (&self.state, &self.code) {
            (Some(state), Some(code)) => Ok((state, code)),
            _ => Err(Stop(
                StatusCode::BAD_REQUEST,
                "This address lacks the `state` and `code` an authorization server sends back."
                    .into(),
            )),
        }
    }
}

/// `GET /oauth/signed-in`: the browser back from moat's authorization server.
async fn signed_in(
    State(pages): State<Pages>,
    Query(back): Query<Back>,
    headers: HeaderMap,
) -> Response {
    let broker = match pages.broker() {
        Ok(broker) => broker,
        Err(stop) => return stop.page(),
    };
    let (state, code) = match back.state_and_code() {
        Ok(answer) => answer,
        Err(stop) => return stop.page(),
    };
    let Some(Step::SignIn {
        link,
        verifier,
        browser: bound,
        redirect_uri,
    }) = broker.consents().take(state).await
    else {
        return not_connected(StatusCode::BAD_REQUEST, USED);
    };
    let Some(cookie) = browser(&headers).filter(|c| browser_digest(c) == bound) else {
        return not_connected(
            StatusCode::FORBIDDEN,
            "This sign-in reached another browser than the one that opened the link.",
        );
    };
    let gate = pages.live.as_ref().map(Live::gate);
    let oauth = match gate.as_deref().map(|g| &g.authentication) {
        Some(Authentication::Required { authenticator, .. }) => authenticator.oauth(),
        _ => None,
    };
    let Some(oauth) = oauth else {
        return not_connected(
            StatusCode::SERVICE_UNAVAILABLE,
            "This moat no longer signs anyone in with OAuth.",
        );
    };
    let signed_in = match oauth.signed_in(code, &verifier, &redirect_uri).await {
        Ok(principal) => principal,
        Err(why) => return not_connected(StatusCode::BAD_REQUEST, &format!("{why}.")),
    };
    let Some(Step::Link {
        source, principal, ..
    }) = broker.consents().peek(&link).await
    else {
        return not_connected(StatusCode::BAD_REQUEST, USED);
    };
    if signed_in.name != principal {
        tracing::warn!(
            source,
            principal,
            signed_in = signed_in.name,
            link = digest(&link),
            "a consent link was opened by someone else: nothing connected"
        );
        return not_connected(
            StatusCode::FORBIDDEN,
            &format!(
                "This link was made for {principal}, and you signed in as {}. Nothing was \
                 connected: only {principal} can connect their account with it.",
                signed_in.name
            ),
        );
    }
    // Taken only now: a link opened by the wrong person still serves the right one.
    if broker.consents().take(&link).await.is_none() {
        return not_connected(StatusCode::BAD_REQUEST, USED);
    }
    match broker
        .send_upstream(&source, &principal, browser_digest(&cookie))
        .await
    {
        Ok(url) => see_other(&url, None),
        Err(why) => not_connected(StatusCode::BAD_REQUEST, &why),
    }
}

/// `GET /oauth/callback/{source}`: the browser back from the third party.
pub async fn callback(
    State(pages): State<Pages>,
    Path(source): Path<String>,
    Query(back): Query<Back>,
    headers: HeaderMap,
) -> Response {
    let broker = match pages.broker() {
        Ok(broker) => broker,
        Err(stop) => return stop.page(),
    };
    let (state, code) = match back.state_and_code() {
        Ok(answer) => answer,
        Err(stop) => return stop.page(),
    };
    let cookie = browser(&headers);
    let answer = Answer {
        source: &source,
        state,
        code,
        iss: back.iss.as_deref(),
        browser: cookie.as_deref(),
    };
    match broker.complete_consent(answer).await {
        Ok((source, principal)) => {
            tracing::info!(source, principal, "a caller connected their account");
            page(
                StatusCode::OK,
                "Connected",
                &format!(
                    "Your account at \"{source}\" is connected for {principal}. You can close \
                     this window and go back to your conversation."
                ),
            )
        }
        Err(why) => {
            tracing::warn!(
                source,
                state = digest(state),
                "a consent callback was refused: {why}"
            );
            not_connected(StatusCode::BAD_REQUEST, &format!("{why}."))
        }
    }
}

fn not_connected(status: StatusCode, why: &str) -> Response {
    page(status, "Not connected", why)
}
