//! Who is at the console: an operator signs in with the OAuth issuer callers use (moat as its
//! client: authorization code with PKCE), or opens a one-time link `moat console` asked for
//! with a credential moat accepts. Either way the browser gets a session cookie (`__Host-`,
//! HttpOnly, SameSite=Strict, short-lived) and each page a CSRF token for its forms.
//!
//! Sessions live in this process: behind a load balancer, a browser signs in on each replica
//! it reaches (sticky sessions keep it on one).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::extract::{FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

use super::answer::{self, Refusal};
use super::{Console, Shared};
use crate::access::Principal;
use crate::access::oauth::client::{pkce, random};
use crate::mcp::http::auth::Authentication;
use crate::mcp::http::cookie;
use crate::serve::config::Admin;
use crate::upstream::consent::steps::browser_digest;

/// The session cookie.
const SESSION: &str = "__Host-moat-console";
/// The cookie that binds a sign-in to the browser that began it: SameSite=Lax, since the
/// issuer's redirect back is a cross-site navigation.
const FLOW: &str = "__Host-moat-console-flow";
/// How long a sign-in at the issuer, or a one-time link, may take.
const FLOW_LIFETIME: Duration = Duration::from_secs(600);
const LINK_LIFETIME: Duration = Duration::from_secs(120);
/// Flows and links waiting at once, at most: more are refused, not kept.
const MAX_WAITING: usize = 1000;

struct Session {
    principal: Principal,
    csrf: String,
    expires: Instant,
}

struct Flow {
    verifier: String,
    browser: String,
    redirect_uri: String,
    expires: Instant,
}

/// The signed-in browsers, the sign-ins under way and the one-time links not yet opened, each
/// by the digest of its secret.
#[derive(Default)]
pub struct Sessions {
    sessions: Mutex<HashMap<String, Session>>,
    flows: Mutex<HashMap<String, Flow>>,
    links: Mutex<HashMap<String, (Principal, Instant)>>,
}

impl Sessions {
    /// A new session for `principal`, lasting `lifetime`: the cookie's value.
    fn open(&self, principal: Principal, lifetime: Duration) -> Result<String, Refusal> {
        let cookie = random::<32>().map_err(Refusal::unavailable)?;
        let csrf = random::<24>().map_err(Refusal::unavailable)?;
        let mut sessions = self.sessions.lock().expect("sessions lock");
        let now = Instant::now();
        sessions.retain(|_, s| s.expires > now);
        let session = Session {
            principal,
            csrf,
            expires: now + lifetime,
        };
        sessions.insert(browser_digest(&cookie), session);
        Ok(cookie)
    }
}

/// A posted form's fields, in order. Read from any body (a missing or foreign content type
/// reads as no fields), so that a form without the CSRF token is refused for that.
pub struct Posted(pub Vec<(String, String)>);

/// The largest form read.
const MAX_FORM_BYTES: usize = 1 << 20;

impl Posted {
    /// The field `name`'s value, if it was sent.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

impl<S: Send + Sync> axum::extract::FromRequest<S> for Posted {
    type Rejection = Refusal;

    async fn from_request(request: axum::extract::Request, _: &S) -> Result<Self, Refusal> {
        let bytes = axum::body::to_bytes(request.into_body(), MAX_FORM_BYTES)
            .await
            .map_err(|_| Refusal::new(StatusCode::PAYLOAD_TOO_LARGE, "This form is too large."))?;
        Ok(Self(form_urlencoded::parse(&bytes).into_owned().collect()))
    }
}

/// The operator at the browser: signed in, and named in `[console] admins`.
pub struct Operator {
    pub principal: Principal,
    pub csrf: String,
    /// The address the browser came from.
    pub remote: Option<std::net::IpAddr>,
}

impl Operator {
    /// Refuses a form that does not carry this session's CSRF token.
    pub fn check(&self, csrf: Option<&str>) -> Result<(), Refusal> {
        let given = csrf.unwrap_or_default().as_bytes();
        let matches = given.len() == self.csrf.len()
            && given
                .iter()
                .zip(self.csrf.as_bytes())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0;
        if matches {
            return Ok(());
        }
        Err(Refusal::new(
            StatusCode::FORBIDDEN,
            "This form did not come from a console page of this session (its CSRF token is \
             missing or wrong). Open the page again and resend it.",
        ))
    }
}

impl FromRequestParts<Console> for Operator {
    type Rejection = Refusal;

    async fn from_request_parts(parts: &mut Parts, console: &Console) -> Result<Self, Refusal> {
        let cookie = cookie(&parts.headers, SESSION).ok_or_else(Refusal::sign_in)?;
        let (principal, csrf) = {
            let sessions = console
                .inner
                .sessions
                .sessions
                .lock()
                .expect("sessions lock");
            let session = sessions
                .get(&browser_digest(&cookie))
                .filter(|s| s.expires > Instant::now())
                .ok_or_else(Refusal::sign_in)?;
            (session.principal.clone(), session.csrf.clone())
        };
        if !is_admin(console, &principal) {
            return Err(Refusal::new(
                StatusCode::FORBIDDEN,
                &format!(
                    "You are signed in as {}, who is not an operator of this moat ([console] \
                     admins).",
                    principal.name
                ),
            ));
        }
        let remote = parts
            .extensions
            .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
            .map(|info| info.0.ip());
        Ok(Operator {
            principal,
            csrf,
            remote,
        })
    }
}

/// Whether `principal` is one of the operators moat.toml names now.
fn is_admin(console: &Console, principal: &Principal) -> bool {
    let current = console.inner.reloads.current();
    let Some(settings) = &current.console else {
        return false;
    };
    settings.admins.iter().any(|admin| match admin {
        Admin::Principal(name) => *name == principal.name,
        Admin::Group(group) => principal.groups.iter().any(|g| g == group),
    })
}

/// How long a sign-in lasts now.
fn lifetime(console: &Console) -> Duration {
    let current = console.inner.reloads.current();
    (current.console.as_ref()).map_or(Duration::from_secs(1800), |c| c.session)
}

/// The origin browsers reach the console at, from the request's `Host`.
fn origin(console: &Console, headers: &HeaderMap) -> Result<String, Refusal> {
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .filter(|h| !h.is_empty() && !h.contains(['/', '@', ' ']))
        .ok_or_else(|| Refusal::new(StatusCode::BAD_REQUEST, "The request names no Host."))?;
    let scheme = if console.inner.https { "https" } else { "http" };
    Ok(format!("{scheme}://{host}"))
}

/// A page that sets the session cookie and moves on to the overview. Not a redirect: a
/// SameSite=Strict cookie set while coming back from the issuer would not go with one.
fn entered(cookie: &str, lifetime: Duration) -> Response {
    let set = format!(
        "{SESSION}={cookie}; Path=/; Secure; HttpOnly; SameSite=Strict; Max-Age={}",
        lifetime.as_secs()
    );
    let mut response = answer::moving_on("/console/").into_response();
    if let Ok(value) = HeaderValue::from_str(&set) {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
    let clear = format!("{FLOW}=; Path=/; Secure; HttpOnly; SameSite=Lax; Max-Age=0");
    if let Ok(value) = HeaderValue::from_str(&clear) {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
    response
}

/// `GET /console/sign-in`: to the issuer, bound to this browser.
pub async fn sign_in(State(console): Shared, headers: HeaderMap) -> Result<Response, Refusal> {
    let gate = console.inner.live.gate();
    let oauth = gate.authentication.oauth().ok_or_else(|| {
        Refusal::new(
            StatusCode::NOT_FOUND,
            "This moat signs no one in with OAuth: run `moat console` on its machine for a \
             one-time link.",
        )
    })?;
    let redirect_uri = format!("{}/console/signed-in", origin(&console, &headers)?);
    let browser = random::<32>().map_err(Refusal::unavailable)?;
    let state = random::<16>().map_err(Refusal::unavailable)?;
    let (verifier, challenge) = pkce().map_err(Refusal::unavailable)?;
    let url = (oauth.sign_in_url(&redirect_uri, &state, &challenge).await)
        .map_err(Refusal::unavailable)?;
    {
        let mut flows = console.inner.sessions.flows.lock().expect("flows lock");
        let now = Instant::now();
        flows.retain(|_, f| f.expires > now);
        if flows.len() >= MAX_WAITING {
            return Err(Refusal::new(
                StatusCode::TOO_MANY_REQUESTS,
                "Too many sign-ins under way: try again in a few minutes.",
            ));
        }
        let flow = Flow {
            verifier,
            browser: browser_digest(&browser),
            redirect_uri,
            expires: now + FLOW_LIFETIME,
        };
        flows.insert(state, flow);
    }
    let set = format!(
        "{FLOW}={browser}; Path=/; Secure; HttpOnly; SameSite=Lax; Max-Age={}",
        FLOW_LIFETIME.as_secs()
    );
    let mut response = answer::see_other(&url);
    if let Ok(value) = HeaderValue::from_str(&set) {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
    Ok(response)
}

#[derive(Deserialize)]
pub struct Back {
    state: Option<String>,
    code: Option<String>,
    error: Option<String>,
    error_description: Option<String>,
}

/// `GET /console/signed-in`: back from the issuer.
pub async fn signed_in(
    State(console): Shared,
    Query(back): Query<Back>,
    headers: HeaderMap,
) -> Result<Response, Refusal> {
    if let Some(error) = &back.error {
        let why = back.error_description.as_deref().unwrap_or(error);
        return Err(Refusal::new(
            StatusCode::BAD_REQUEST,
            &format!("The authorization server said: {why}."),
        ));
    }
    let (Some(state), Some(code)) = (&back.state, &back.code) else {
        return Err(Refusal::new(
            StatusCode::BAD_REQUEST,
            "This address lacks the `state` and `code` an authorization server sends back.",
        ));
    };
    let flow = {
        let mut flows = console.inner.sessions.flows.lock().expect("flows lock");
        flows.remove(state).filter(|f| f.expires > Instant::now())
    };
    let expired = || {
        Refusal::new(
            StatusCode::BAD_REQUEST,
            "This sign-in expired or was used already: sign in again.",
        )
    };
    let flow = flow.ok_or_else(expired)?;
    let bound = cookie(&headers, FLOW).map(|c| browser_digest(&c));
    if bound.as_deref() != Some(flow.browser.as_str()) {
        return Err(Refusal::new(
            StatusCode::FORBIDDEN,
            "This sign-in reached another browser than the one that began it.",
        ));
    }
    let gate = console.inner.live.gate();
    let oauth = gate.authentication.oauth().ok_or_else(expired)?;
    let principal = (oauth
        .signed_in(code, &flow.verifier, &flow.redirect_uri)
        .await)
        .map_err(|why| Refusal::new(StatusCode::BAD_REQUEST, &format!("{why}.")))?;
    tracing::info!(principal = principal.name, "signed in to the console");
    let lifetime = lifetime(&console);
    let cookie = console.inner.sessions.open(principal, lifetime)?;
    Ok(entered(&cookie, lifetime))
}

/// `POST /console/sign-out`.
pub async fn sign_out(
    State(console): Shared,
    operator: Operator,
    headers: HeaderMap,
    form: Posted,
) -> Result<Response, Refusal> {
    operator.check(form.get("csrf"))?;
    if let Some(cookie) = cookie(&headers, SESSION) {
        let mut sessions = console
            .inner
            .sessions
            .sessions
            .lock()
            .expect("sessions lock");
        sessions.remove(&browser_digest(&cookie));
    }
    let mut response = answer::see_other("/console/");
    let clear = format!("{SESSION}=; Path=/; Secure; HttpOnly; SameSite=Strict; Max-Age=0");
    if let Ok(value) = HeaderValue::from_str(&clear) {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
    Ok(response)
}

/// `POST /console/link`, with a credential moat accepts (`moat console` sends the local
/// token): a link that signs one browser in as its principal, once, within two minutes.
pub async fn link(State(console): Shared, headers: HeaderMap) -> Response {
    let gate = console.inner.live.gate();
    let principal = match &gate.authentication {
        Authentication::Off => Ok(Principal::anonymous()),
        Authentication::Required { authenticator, .. } => {
            let credential = headers
                .get(header::AUTHORIZATION)
                .map(HeaderValue::as_bytes);
            authenticator
                .authenticate(credential)
                .await
                .map_err(|_| "the credential was refused".to_string())
        }
    };
    let refused =
        |status: StatusCode, error: String| json_answer(status, json!({ "error": error }));
    let principal = match principal {
        Ok(principal) => principal,
        Err(why) => return refused(StatusCode::UNAUTHORIZED, why),
    };
    if !is_admin(&console, &principal) {
        let why = format!("{} is not an operator ([console] admins)", principal.name);
        return refused(StatusCode::FORBIDDEN, why);
    }
    let origin = match origin(&console, &headers) {
        Ok(origin) => origin,
        Err(_) => return refused(StatusCode::BAD_REQUEST, "no Host".into()),
    };
    let Ok(token) = random::<32>() else {
        return refused(StatusCode::SERVICE_UNAVAILABLE, "no randomness".into());
    };
    {
        let mut links = console.inner.sessions.links.lock().expect("links lock");
        let now = Instant::now();
        links.retain(|_, (_, expires)| *expires > now);
        if links.len() >= MAX_WAITING {
            return refused(StatusCode::TOO_MANY_REQUESTS, "too many links".into());
        }
        links.insert(browser_digest(&token), (principal, now + LINK_LIFETIME));
    }
    let url = format!("{origin}/console/enter/{token}");
    json_answer(StatusCode::OK, json!({ "url": url }))
}

fn json_answer(status: StatusCode, body: serde_json::Value) -> Response {
    let kind = [(header::CONTENT_TYPE, "application/json")];
    (status, kind, body.to_string()).into_response()
}

/// `GET /console/enter/{token}`: a one-time link, spent by opening it.
pub async fn enter(State(console): Shared, Path(token): Path<String>) -> Result<Response, Refusal> {
    let taken = {
        let mut links = console.inner.sessions.links.lock().expect("links lock");
        links.remove(&browser_digest(&token))
    };
    let Some((principal, _)) = taken.filter(|(_, expires)| *expires > Instant::now()) else {
        return Err(Refusal::new(
            StatusCode::BAD_REQUEST,
            "This link was used already or has expired: run `moat console` for a new one.",
        ));
    };
    tracing::info!(
        principal = principal.name,
        "signed in to the console by a one-time link"
    );
    let lifetime = lifetime(&console);
    let cookie = console.inner.sessions.open(principal, lifetime)?;
    Ok(entered(&cookie, lifetime))
}
