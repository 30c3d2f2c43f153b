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
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Deserialize;

pub use self::loopback::Loopback;
use self::page::{bind, browser, confirmation, page, see_other, setting};
use super::Live;
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

    /// The gate of the moment, when it signs browsers in with OAuth.
    fn signing_in(&self) -> Result<std::sync::Arc<super::Gate>, Stop> {
        let gate = self.live.as_ref().map(Live::gate);
        gate.filter(|gate| gate.authentication.oauth().is_some())
            .ok_or_else(|| {
                Stop(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "This moat no longer signs anyone in with OAuth.".into(),
                )
            })
    }
}

/// Why a browser goes no further: the status, and what its page says.
struct Stop(StatusCode, String);

impl Stop {
    /// The link is spent, past its time, or not moat's.
    fn used() -> Self {
        Self(StatusCode::BAD_REQUEST, USED.into())
    }
}

impl IntoResponse for Stop {
    fn into_response(self) -> Response {
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
) -> Result<Response, Stop> {
    let broker = pages.broker()?;
    let Some(Step::Link {
        source,
        principal,
        proof,
    }) = broker.consents().peek(&link).await
    else {
        return Err(Stop::used());
    };
    let settings = broker.consent_settings(&source).ok_or_else(|| {
        Stop(
            StatusCode::BAD_REQUEST,
            format!("The credential source \"{source}\" is no longer configured."),
        )
    })?;
    let (cookie, set_cookie) =
        bind(&headers).map_err(|why| Stop(StatusCode::INTERNAL_SERVER_ERROR, why))?;
    match proof {
        Proof::Confirm => {
            let token = confirmation_token(&cookie, &link);
            let page = confirmation(&link, &principal, &source, &token);
            Ok(setting(page, set_cookie))
        }
        Proof::SignIn => {
            let redirect_uri = format!("{}/oauth/signed-in", settings.base());
            let url = sign_in(&pages, &link, &cookie, redirect_uri, &broker).await?;
            Ok(see_other(&url, set_cookie))
        }
        Proof::Loopback => Err(Stop::used()),
    }
}

/// Where to sign the browser bound by `cookie` in, for `link`; the step that waits for it.
async fn sign_in(
    pages: &Pages,
    link: &str,
    cookie: &str,
    redirect_uri: String,
    broker: &Broker,
) -> Result<String, Stop> {
    let gate = pages.signing_in()?;
    let oauth = gate.authentication.oauth().expect("signing_in checked it");
    let unavailable = |why: String| Stop(StatusCode::SERVICE_UNAVAILABLE, why);
    let state = random::<16>().map_err(unavailable)?;
    let (verifier, challenge) = pkce().map_err(unavailable)?;
    let url = (oauth.sign_in_url(&redirect_uri, &state, &challenge).await).map_err(unavailable)?;
    let step = Step::SignIn {
        link: link.to_string(),
        verifier,
        browser: browser_digest(cookie),
        redirect_uri,
    };
    broker
        .consents()
        .put(&state, &step)
        .await
        .map_err(unavailable)?;
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
) -> Result<Response, Stop> {
    let broker = pages.broker()?;
    // The token is made from the browser's own cookie: a form posted from another site, or
    // by another browser, does not carry it.
    let Some(cookie) = browser(&headers).filter(|c| confirmation_token(c, &link) == form.token)
    else {
        return Err(Stop(
            StatusCode::FORBIDDEN,
            "This confirmation did not come from the page this browser was shown.".into(),
        ));
    };
    let Some(Step::Link {
        source,
        principal,
        proof: Proof::Confirm,
    }) = broker.consents().take(&link).await
    else {
        return Err(Stop::used());
    };
    tracing::info!(
        source,
        principal,
        link = digest(&link),
        "a browser confirmed a consent link"
    );
    upstream(&broker, &source, &principal, &cookie).await
}

/// Sends the browser bound by `cookie`, proved to be `principal`, on to `source`.
async fn upstream(
    broker: &Broker,
    source: &str,
    principal: &str,
    cookie: &str,
) -> Result<Response, Stop> {
    let url = broker
        .send_upstream(source, principal, browser_digest(cookie))
        .await
        .map_err(|why| Stop(StatusCode::BAD_REQUEST, why))?;
    Ok(see_other(&url, None))
}

#[derive(Deserialize)]
struct Back {
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
) -> Result<Response, Stop> {
    let broker = pages.broker()?;
    let (state, code) = back.state_and_code()?;
    let Some(Step::SignIn {
        link,
        verifier,
        browser: bound,
        redirect_uri,
    }) = broker.consents().take(state).await
    else {
        return Err(Stop::used());
    };
    let Some(cookie) = browser(&headers).filter(|c| browser_digest(c) == bound) else {
        return Err(Stop(
            StatusCode::FORBIDDEN,
            "This sign-in reached another browser than the one that opened the link.".into(),
        ));
    };
    let gate = pages.signing_in()?;
    let oauth = gate.authentication.oauth().expect("signing_in checked it");
    let signed_in = (oauth.signed_in(code, &verifier, &redirect_uri).await)
        .map_err(|why| Stop(StatusCode::BAD_REQUEST, format!("{why}.")))?;
    let Some(Step::Link {
        source, principal, ..
    }) = broker.consents().peek(&link).await
    else {
        return Err(Stop::used());
    };
    if signed_in.name != principal {
        tracing::warn!(
            source,
            principal,
            signed_in = signed_in.name,
            link = digest(&link),
            "a consent link was opened by someone else: nothing connected"
        );
        return Err(Stop(
            StatusCode::FORBIDDEN,
            format!(
                "This link was made for {principal}, and you signed in as {}. Nothing was \
                 connected: only {principal} can connect their account with it.",
                signed_in.name
            ),
        ));
    }
    // Taken only now: a link opened by the wrong person still serves the right one.
    if broker.consents().take(&link).await.is_none() {
        return Err(Stop::used());
    }
    upstream(&broker, &source, &principal, &cookie).await
}

/// `GET /oauth/callback/{source}`: the browser back from the third party.
async fn callback(
    State(pages): State<Pages>,
    Path(source): Path<String>,
    Query(back): Query<Back>,
    headers: HeaderMap,
) -> Result<Response, Stop> {
    let broker = pages.broker()?;
    let (state, code) = back.state_and_code()?;
    let cookie = browser(&headers);
    let answer = Answer {
        source: &source,
        state,
        code,
        iss: back.iss.as_deref(),
        browser: cookie.as_deref(),
    };
    let (source, principal) = broker.complete_consent(answer).await.map_err(|why| {
        tracing::warn!(
            source,
            state = digest(state),
            "a consent callback was refused: {why}"
        );
        Stop(StatusCode::BAD_REQUEST, format!("{why}."))
    })?;
    tracing::info!(source, principal, "a caller connected their account");
    Ok(page(
        StatusCode::OK,
        "Connected",
        &format!(
            "Your account at \"{source}\" is connected for {principal}. You can close this \
             window and go back to your conversation."
        ),
    ))
}

fn not_connected(status: StatusCode, why: &str) -> Response {
    page(status, "Not connected", why)
}
