//! The credentials a plugin's requests carry upstream for the one who called (`[credentials]`).
//!
//! A plugin's `inject` entry may take its value from a source (`${credential:NAME}`) instead of
//! a fixed secret: then each call's requests to that source's hosts carry the calling
//! principal's own credential, so the upstream sees, and audits, the person who asked. The
//! guest never holds it: moat adds it on the way out and takes it out of the answer
//! (`sandbox::network`). A source gives a principal its credential from, in this order:
//! - `principals`: a secret of the secrets file named for that principal (machine clients,
//!   API keys, the stdio user);
//! - `exchange`: the caller's own access token, traded at the authorization server for one
//!   meant for the upstream (RFC 8693), kept until shortly before it expires;
//! - `consent`: the caller's own consent at the upstream's authorization server, asked for
//!   with a URL elicitation the first time (`consent`), kept and refreshed after.
//!
//! A call whose caller has no credential from a source sends no request that needs one: the
//! guest gets a denied request and the caller a tool error saying why.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};

use crate::access::{AccessToken, Principal, Via};
use crate::sandbox::host::{MOATS_OWN, Question};
use crate::sandbox::network::{CallCredentials, Missing, NetworkGrant};

pub mod consent;
pub mod exchange;

/// How long an exchange may take.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest an access token from an upstream's authorization server is used, whatever
/// lifetime it claims: a claim near 2^64 seconds would overflow a clock.
const MAX_LIFETIME: Duration = Duration::from_secs(24 * 3600);

/// One source of `[credentials]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Source {
    /// The hosts its credentials may be sent to; an `inject` entry using it must go to one.
    pub hosts: Vec<NetworkGrant>,
    /// A fixed credential for each principal named.
    pub principals: HashMap<String, Secret>,
    /// Token exchange for OAuth callers.
    pub exchange: Option<exchange::Settings>,
    /// The caller's consent at the upstream's authorization server.
    pub consent: Option<consent::Settings>,
}

/// Serves moat's callback at a `redirect_uri` for a stdio moat, which serves no HTTP, or says
/// why it cannot.
pub type Loopback = Arc<dyn Fn(&str) -> Result<(), String> + Send + Sync>;

/// A credential read from the secrets file; it never prints.
#[derive(Clone, PartialEq)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Every source, as moat serves them now, with the tokens exchanged so far.
pub struct Broker {
    sources: BTreeMap<String, Source>,
    kept: exchange::Kept,
    consents: consent::Consents,
    http: reqwest::Client,
}

impl Broker {
    /// Serves `sources`, keeping callers' consented tokens as `keeping` says.
    pub fn new(
        sources: BTreeMap<String, Source>,
        keeping: Box<dyn crate::shared::consents::Keeping>,
    ) -> Result<Self> {
        crate::supply::source::install_tls_provider();
        let http = reqwest::Client::builder()
            .user_agent(concat!("moat/", env!("CARGO_PKG_VERSION")))
            .redirect(reqwest::redirect::Policy::none())
            .timeout(EXCHANGE_TIMEOUT)
            .build()
            .context("setting up the HTTP client for token exchange")?;
        Ok(Self {
            sources,
            kept: exchange::Kept::default(),
            consents: consent::Consents::new(keeping),
            http,
        })
    }

    /// Whether any source is configured: without one, calls need no credentials bound.
    pub fn is_empty(&self) -> bool {
        self.sources.is_empty()
    }

    pub fn sources(&self) -> &BTreeMap<String, Source> {
        &self.sources
    }

    /// The credentials of one call made by `principal`, who sent `token` (an OAuth caller);
    /// `loopback` serves consent callbacks when `principal` is the stdio user.
    pub fn for_call(
        self: &Arc<Self>,
        principal: &Principal,
        token: Option<AccessToken>,
        loopback: Option<Loopback>,
    ) -> Arc<Caller> {
        let stdio = principal.via == Via::Stdio;
        Arc::new(Caller {
            broker: self.clone(),
            principal: principal.name.clone(),
            via: principal.via,
            callback: match (stdio, loopback) {
                (false, _) => Callback::Http,
                (true, Some(loopback)) => Callback::Loopback(loopback),
                (true, None) => Callback::None,
            },
            token,
            used: Mutex::default(),
        })
    }

    /// Wakes the calls here waiting for consent: another replica kept a caller's tokens.
    pub fn consent_arrived(&self) {
        self.consents.arrived_elsewhere();
    }

    /// The consent steps under way, for the pages a caller's browser goes through.
    pub fn consents(&self) -> &consent::Consents {
        &self.consents
    }

    /// How `source` asks its callers' consent, if it does.
    pub fn consent_settings(&self, source: &str) -> Option<&consent::Settings> {
        self.sources.get(source).and_then(|s| s.consent.as_ref())
    }

    /// Sends a browser that proved to be `principal` on to `source`'s authorization server.
    pub async fn send_upstream(
        &self,
        source: &str,
        principal: &str,
        browser: String,
    ) -> Result<String, String> {
        let settings = self.consent_settings(source).ok_or_else(|| {
            format!("the credential source \"{source}\" no longer asks callers' consent")
        })?;
        self.consents
            .upstream(source, principal, Some(browser), settings)
            .await
    }

    /// Ends a consent flow at a source's callback: the source and principal it connected.
    pub async fn complete_consent(
        &self,
        answer: consent::Answer<'_>,
    ) -> Result<(String, String), String> {
        self.consents
            .complete(&self.http, answer, |name| {
                self.consent_settings(name).cloned()
            })
            .await
    }

    async fn credential(
        &self,
        name: &str,
        (principal, via): (&str, Via),
        token: Option<&AccessToken>,
        callback: &Callback,
    ) -> Result<String, Missing> {
        let Some(source) = self.sources.get(name) else {
            return Err(Missing::Refused(format!(
                "the credential source \"{name}\" is no longer configured"
            )));
        };
        if let Some(secret) = source.principals.get(principal) {
            return Ok(secret.0.clone());
        }
        match (&source.exchange, token, &source.consent) {
            (Some(settings), Some(token), _) => {
                if let Some(kept) = self.kept.get(name, principal, token.secret()) {
                    return Ok(kept);
                }
                // One exchange at a time per principal and source: the calls that arrive
                // meanwhile take the token it keeps instead of each asking for their own.
                let _turn = self.kept.turn(name, principal).await;
                if let Some(kept) = self.kept.get(name, principal, token.secret()) {
                    return Ok(kept);
                }
                let exchanged = exchange::exchange(&self.http, settings, token.secret())
                    .await
                    .map_err(|why| {
                        Missing::Refused(format!("no credential from \"{name}\": {why}"))
                    })?;
                tracing::debug!(source = name, principal, "exchanged an access token");
                self.kept.keep(name, principal, token.secret(), &exchanged);
                Ok(exchanged.access_token)
            }
            (_, _, Some(settings)) => {
                callback.serve(&settings.redirect_uri).map_err(|why| {
                    Missing::Refused(format!(
                        "the credential source \"{name}\" asks the caller to connect their \
                         account, which ends at moat's /oauth/callback/{name}, and {why}: give principal \
                         \"{principal}\" a secret in its `principals`, or a loopback redirect_uri"
                    ))
                })?;
                let held = self
                    .consents
                    .token(&self.http, name, principal, settings)
                    .await
                    .map_err(|why| {
                        Missing::Refused(format!("no credential from \"{name}\": {why}"))
                    })?;
                if let Some(token) = held {
                    return Ok(token);
                }
                let proof = proof(name, principal, via, settings).map_err(Missing::Refused)?;
                let link = self
                    .consents
                    .link(name, principal, proof, settings)
                    .await
                    .map_err(Missing::Refused)?;
                Err(Missing::Consent(Question {
                    key: format!("{MOATS_OWN}consent:{name}"),
                    method: "elicitation/create".into(),
                    params: serde_json::json!({
                        "mode": "url",
                        "message": format!(
                            "This tool acts for {principal} at {}: connect your account for \
                             \"{name}\" to go on.",
                            settings.authorization_endpoint
                        ),
                        "url": link.url,
                        "elicitationId": link.elicitation_id,
                    }),
                    form: None,
                }))
            }
            (Some(_), None, None) => Err(Missing::Refused(format!(
                "the credential source \"{name}\" exchanges the caller's OAuth access token, and \
                 principal \"{principal}\" signed in without one"
            ))),
            (None, _, None) => Err(Missing::Refused(format!(
                "the credential source \"{name}\" has nothing for principal \"{principal}\" \
                 (it names a secret for some principals only)"
            ))),
        }
    }

    /// `principal`'s consented token from `source`, once it arrives.
    async fn consented(&self, name: &str, principal: &str) -> Result<String, String> {
        let Some(settings) = self.sources.get(name).and_then(|s| s.consent.as_ref()) else {
            return Err(format!("the credential source \"{name}\" asks no consent"));
        };
        loop {
            // Registered before looking, so that tokens arriving in between wake it.
            let arrival = self.consents.arrival();
            if let Some(token) = self
                .consents
                .token(&self.http, name, principal, settings)
                .await?
            {
                return Ok(token);
            }
            arrival.await;
        }
    }
}

/// How the browser that opens `principal`'s link for `source` shows it is theirs, or why no
/// browser can.
fn proof(
    source: &str,
    principal: &str,
    via: Via,
    settings: &consent::Settings,
) -> Result<consent::Proof, String> {
    let unproven = |how: &str| {
        format!(
            "the credential source \"{source}\" asks the caller to connect their account, and \
             principal \"{principal}\" signed in with {how}, which no browser can prove: set \
             `confirm_unproven = true` in its `consent` to connect such callers after they confirm \
             a page naming them, or give the principal a secret in `principals`"
        )
    };
    match via {
        Via::Stdio => Ok(consent::Proof::Loopback),
        Via::Jwt | Via::Introspection => Ok(consent::Proof::SignIn),
        Via::ApiKey | Via::LocalToken if settings.confirm_unproven => Ok(consent::Proof::Confirm),
        Via::ApiKey => Err(unproven("an API key")),
        Via::LocalToken => Err(unproven("the local token")),
        // Anyone at all: tokens kept for them would serve everyone.
        Via::Unauthenticated => Err(format!(
            "the credential source \"{source}\" asks the caller to connect their account, and \
             this moat serves without authentication: whatever one caller connected would act \
             for every other"
        )),
    }
}

/// Where the caller's browser comes back to after consenting.
enum Callback {
    /// moat's HTTP server, which serves `/oauth/callback/{source}` with MCP.
    Http,
    /// A stdio moat's listener on the redirect_uri's loopback address.
    Loopback(Loopback),
    /// Nowhere: a stdio caller with no way to listen.
    None,
}

impl Callback {
    /// Makes sure the browser finds moat at `redirect_uri`, or says why it cannot.
    fn serve(&self, redirect_uri: &str) -> Result<(), String> {
        match self {
            Self::Http => Ok(()),
            Self::Loopback(serve) => serve(redirect_uri),
            Self::None => Err("this stdio moat serves none".into()),
        }
    }
}

/// The credentials of one call, for its principal only; it tells which sources the call used.
pub struct Caller {
    broker: Arc<Broker>,
    principal: String,
    via: Via,
    callback: Callback,
    token: Option<AccessToken>,
    /// Each source the call's requests used, with the credential last sent from it.
    used: Mutex<Vec<(String, String)>>,
}

impl Caller {
    fn record(&self, source: &str, credential: &str) {
        let mut used = self.used.lock().unwrap_or_else(|e| e.into_inner());
        match used.iter_mut().find(|(u, _)| u == source) {
            Some((_, last)) => *last = credential.to_string(),
            None => used.push((source.to_string(), credential.to_string())),
        }
    }

    /// The credential last sent from `source`.
    fn sent(&self, source: &str) -> Option<String> {
        let used = self.used.lock().unwrap_or_else(|e| e.into_inner());
        used.iter()
            .find(|(u, _)| u == source)
            .map(|(_, c)| c.clone())
    }

    /// The sources whose credentials the call's requests carried, each once.
    pub fn used(&self) -> Vec<String> {
        let used = self.used.lock().unwrap_or_else(|e| e.into_inner());
        used.iter().map(|(source, _)| source.clone()).collect()
    }
}

impl CallCredentials for Caller {
    fn consented<'a>(
        &'a self,
        source: &'a str,
    ) -> Pin<Box<dyn Future<Output = Result<String, String>> + Send + 'a>> {
        Box::pin(async move {
            let credential = self.broker.consented(source, &self.principal).await?;
            self.record(source, &credential);
            Ok(credential)
        })
    }

    fn get<'a>(
        &'a self,
        source: &'a str,
    ) -> Pin<Box<dyn Future<Output = Result<String, Missing>> + Send + 'a>> {
        Box::pin(async move {
            let credential = self
                .broker
                .credential(
                    source,
                    (&self.principal, self.via),
                    self.token.as_ref(),
                    &self.callback,
                )
                .await?;
            self.record(source, &credential);
            Ok(credential)
        })
    }

    fn refused<'a>(&'a self, source: &'a str) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>> {
        Box::pin(async move {
            // A token the upstream no longer takes (revoked, expired early, its rights
            // changed): the next request exchanges anew, or refreshes a consented one before
            // asking the caller again. A fixed secret stays what the operator configured.
            self.broker.kept.forget(source, &self.principal);
            if let Some(sent) = self.sent(source) {
                (self.broker.consents)
                    .refused(source, &self.principal, &sent)
                    .await;
            }
            tracing::info!(
                source,
                principal = self.principal,
                "the upstream refused the credential (HTTP 401); the next request gets a new one"
            );
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    fn refusal(missing: Missing) -> String {
        match missing {
            Missing::Refused(why) => why,
            Missing::Consent(question) => panic!("asks consent: {question:?}"),
        }
    }

    /// A source that exchanges callers' tokens at `token_endpoint`, and nothing else.
    fn exchanging_at(token_endpoint: &str) -> Source {
        Source {
            hosts: vec!["https://tracker.example".parse().unwrap()],
            principals: HashMap::new(),
            exchange: Some(exchange::Settings {
                token_endpoint: token_endpoint.into(),
                client_id: "moat".into(),
                client_secret: "s".into(),
                audience: None,
                resource: None,
                scope: None,
            }),
            consent: None,
        }
    }

    fn broker(source: Source) -> Arc<Broker> {
        let sources = BTreeMap::from([("tracker".to_string(), source)]);
        let keeping = Box::new(crate::shared::consents::Memory::default());
        Arc::new(Broker::new(sources, keeping).unwrap())
    }

    #[tokio::test]
    async fn a_principal_gets_its_own_secret_and_no_one_elses() {
        let broker = broker(Source {
            hosts: vec!["https://tracker.example".parse().unwrap()],
            principals: HashMap::from([
                ("key:ci".to_string(), Secret("ci-secret".into())),
                ("stdio".to_string(), Secret("my-secret".into())),
            ]),
            exchange: None,
            consent: None,
        });
        let ci = broker.for_call(&Principal::api_key("ci"), None, None);
        assert_eq!(ci.get("tracker").await.unwrap(), "ci-secret");
        assert_eq!(ci.used(), ["tracker"]);
        let me = broker.for_call(&Principal::stdio("stdio"), None, None);
        assert_eq!(me.get("tracker").await.unwrap(), "my-secret");
        let other = broker.for_call(&Principal::api_key("bot"), None, None);
        let why = refusal(other.get("tracker").await.unwrap_err());
        assert!(why.contains("nothing for principal \"key:bot\""), "{why}");
        assert!(other.used().is_empty());
        let gone = refusal(ci.get("wiki").await.unwrap_err());
        assert!(gone.contains("\"wiki\" is no longer configured"), "{gone}");
    }

    fn consenting(confirm_unproven: bool) -> Source {
        Source {
            hosts: vec!["https://tracker.example".parse().unwrap()],
            principals: HashMap::new(),
            exchange: None,
            consent: Some(consent::Settings {
                authorization_endpoint: "https://tracker.example/authorize".into(),
                token_endpoint: "https://tracker.example/token".into(),
                client_id: "moat".into(),
                client_secret: None,
                scope: None,
                resource: None,
                redirect_uri: "https://moat.example/oauth/callback/tracker".into(),
                issuer: None,
                confirm_unproven,
            }),
        }
    }

    /// The link `caller`'s call is sent to.
    async fn link_of(caller: &Caller) -> String {
        match caller.get("tracker").await.unwrap_err() {
            Missing::Consent(question) => {
                assert_eq!(question.key, "moat:consent:tracker");
                question.params["url"].as_str().unwrap().to_string()
            }
            Missing::Refused(why) => panic!("refused: {why}"),
        }
    }

    #[tokio::test]
    async fn a_caller_no_browser_can_prove_is_asked_only_where_the_source_opts_in() {
        let oauth = Principal {
            via: Via::Jwt,
            ..Principal::api_key("x")
        };
        for confirm_unproven in [false, true] {
            let broker = broker(consenting(confirm_unproven));
            // Signed in with OAuth: a link to moat's start page, where the browser signs in.
            let link = link_of(&broker.for_call(&oauth, None, None)).await;
            assert!(
                link.starts_with("https://moat.example/oauth/consent/"),
                "{link}"
            );
            let ci = broker.for_call(&Principal::api_key("ci"), None, None);
            let local = broker.for_call(&Principal::local(), None, None);
            if confirm_unproven {
                for caller in [ci, local] {
                    let link = link_of(&caller).await;
                    assert!(
                        link.starts_with("https://moat.example/oauth/consent/"),
                        "{link}"
                    );
                }
            } else {
                let why = refusal(ci.get("tracker").await.unwrap_err());
                assert!(
                    why.contains(
                        "\"key:ci\" signed in with an API key, which no browser can prove"
                    ),
                    "{why}"
                );
                let why = refusal(local.get("tracker").await.unwrap_err());
                assert!(why.contains("with the local token"), "{why}");
            }
            let anyone = broker.for_call(&Principal::anonymous(), None, None);
            let why = refusal(anyone.get("tracker").await.unwrap_err());
            assert!(why.contains("would act for every other"), "{why}");
        }
    }

    #[tokio::test]
    async fn consent_on_stdio_goes_straight_to_the_third_party_through_a_loopback_listener() {
        let broker = broker(consenting(false));
        let local = broker.for_call(&Principal::stdio("stdio"), None, None);
        let why = refusal(local.get("tracker").await.unwrap_err());
        assert!(
            why.contains("this stdio moat serves none: give principal \"stdio\" a secret"),
            "{why}"
        );
        // A stdio moat that listens on the redirect_uri's loopback address asks, as over HTTP.
        let asked = Arc::new(Mutex::new(Vec::new()));
        let listens: Loopback = {
            let asked = asked.clone();
            Arc::new(move |uri: &str| {
                asked.lock().unwrap().push(uri.to_string());
                Ok(())
            })
        };
        let listening = broker.for_call(&Principal::stdio("stdio"), None, Some(listens));
        let link = link_of(&listening).await;
        assert!(
            link.starts_with("https://tracker.example/authorize?"),
            "{link}"
        );
        assert_eq!(
            *asked.lock().unwrap(),
            ["https://moat.example/oauth/callback/tracker"]
        );
        let cannot: Loopback = Arc::new(|_: &str| Err("the port is taken".to_string()));
        let why = refusal(
            broker
                .for_call(&Principal::stdio("stdio"), None, Some(cannot))
                .get("tracker")
                .await
                .unwrap_err(),
        );
        assert!(
            why.contains("and the port is taken: give principal"),
            "{why}"
        );
    }

    /// A token endpoint that answers every exchange after `delay` with a token naming its
    /// number, counting them.
    async fn counting_token_endpoint(delay: Duration) -> (String, Arc<AtomicUsize>) {
        let count = Arc::new(AtomicUsize::new(0));
        let counted = count.clone();
        let answer = move || {
            let count = count.clone();
            async move {
                let n = count.fetch_add(1, Ordering::SeqCst) + 1;
                tokio::time::sleep(delay).await;
                (
                    [(axum::http::header::CONTENT_TYPE, "application/json")],
                    format!(r#"{{"access_token": "exchanged-{n}", "expires_in": 300}}"#),
                )
            }
        };
        let app = axum::Router::new().route("/token", axum::routing::post(answer));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/token", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (url, counted)
    }

    #[tokio::test]
    async fn calls_at_once_by_one_principal_share_one_exchange() {
        let (endpoint, exchanges) = counting_token_endpoint(Duration::from_millis(200)).await;
        let broker = broker(exchanging_at(&endpoint));
        let call = |name: &str| {
            let caller = broker.for_call(
                &Principal::api_key(name),
                Some(AccessToken::new(name)),
                None,
            );
            async move { caller.get("tracker").await.map_err(refusal) }
        };
        let alice = futures_util::future::join_all((0..5).map(|_| call("alice"))).await;
        assert!(
            alice.iter().all(|t| t.as_deref() == Ok("exchanged-1")),
            "{alice:?}"
        );
        assert_eq!(exchanges.load(Ordering::SeqCst), 1);
        // Another principal waits for no one else's exchange, and gets its own token.
        assert_eq!(call("bob").await.unwrap(), "exchanged-2");
        assert_eq!(exchanges.load(Ordering::SeqCst), 2);
        assert_eq!(broker.kept.turns_held(), 0, "a turn outlived its exchanges");
    }

    #[tokio::test]
    async fn a_kept_token_serves_only_the_access_token_it_was_exchanged_from() {
        let (endpoint, exchanges) = counting_token_endpoint(Duration::ZERO).await;
        let broker = broker(exchanging_at(&endpoint));
        let call = |token: &str| {
            let caller = broker.for_call(
                &Principal::api_key("alice"),
                Some(AccessToken::new(token)),
                None,
            );
            async move { caller.get("tracker").await.map_err(refusal) }
        };
        assert_eq!(call("first").await.unwrap(), "exchanged-1");
        assert_eq!(call("first").await.unwrap(), "exchanged-1");
        // Signed in again (the old token expired, or was revoked): exchanged anew, and the old
        // token gets the new exchange's token only by exchanging again itself.
        assert_eq!(call("second").await.unwrap(), "exchanged-2");
        assert_eq!(call("first").await.unwrap(), "exchanged-3");
        assert_eq!(exchanges.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn an_exchange_needs_the_callers_access_token() {
        let broker = broker(exchanging_at("http://127.0.0.1:9/token"));
        let why = refusal(
            broker
                .for_call(&Principal::api_key("ci"), None, None)
                .get("tracker")
                .await
                .unwrap_err(),
        );
        assert!(
            why.contains("principal \"key:ci\" signed in without one"),
            "{why}"
        );
    }
}
