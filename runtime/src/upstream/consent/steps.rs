//! The steps of one consent, from the link a call gives its caller to the third party's answer.
//!
//! A link connects only the person it was made for (the MCP specification's URL elicitation
//! security considerations). It points at moat, never straight at the third party, and moves
//! on only once the browser that opened it has shown who is there:
//! - a principal who signed in with OAuth signs in again in the browser, at moat's own
//!   authorization server, and must come back as the same principal ([`Proof::SignIn`]);
//! - a principal no browser can prove (an API key, the local token) is connected only where the
//!   source opts in, and then only after a page naming the principal and the source is
//!   confirmed with a POST that carries a token only that browser can make ([`Proof::Confirm`]);
//! - a stdio moat's link goes straight to the third party: its browser is on the caller's own
//!   machine and its callback listens on loopback ([`Proof::Loopback`]).
//!
//! The browser that proves itself is bound to the rest of the flow by a cookie only it holds
//! (`__Host-`, HttpOnly, SameSite=Lax): the third party's answer, carried by another browser,
//! connects no one (RFC 6749 §10.12, RFC 9700 §4.7). Each step is kept under 128 random bits,
//! for ten minutes, and taken once; the PKCE verifiers never leave moat.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{Consents, LINK_LIFETIME, Settings, endpoint};
use crate::access::oauth::client::authorization_url;
pub use crate::access::oauth::client::{pkce, random};

/// How the person at the browser is known to be the principal a link was made for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Proof {
    /// They sign in at moat's own authorization server, as the same principal.
    SignIn,
    /// They confirm, on a page naming the principal and the source.
    Confirm,
    /// A stdio moat's: the browser is on the caller's machine, the callback on loopback.
    Loopback,
}

/// One step of a consent, kept until the browser takes the next.
#[derive(Serialize, Deserialize)]
pub enum Step {
    /// A link a call gave its caller, waiting for a browser to prove them.
    Link {
        source: String,
        principal: String,
        proof: Proof,
    },
    /// A browser that opened link `link`, signing in at moat's authorization server, to come
    /// back at `redirect_uri`.
    SignIn {
        link: String,
        verifier: String,
        browser: String,
        redirect_uri: String,
    },
    /// A browser sent on to the third party for `principal`; `browser` is `None` for a stdio
    /// moat's link.
    Upstream {
        source: String,
        principal: String,
        verifier: String,
        browser: Option<String>,
    },
}

/// What a call sends its caller to, and the question that sends them.
pub struct Link {
    pub url: String,
    /// Names the URL elicitation, so that its completion can be announced.
    pub elicitation_id: String,
}

/// What the third party sent the browser back with, at one source's callback.
pub struct Answer<'a> {
    /// The source whose callback path it came to.
    pub source: &'a str,
    pub state: &'a str,
    pub code: &'a str,
    /// The issuer it names (RFC 9207), if it names one.
    pub iss: Option<&'a str>,
    /// The browser's binding cookie, if it sent one.
    pub browser: Option<&'a str>,
}

/// The digest a step keeps of a browser's binding cookie.
pub fn browser_digest(cookie: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(cookie.as_bytes()))
}

/// The token a confirmation page's form carries: made from the browser's cookie, which no
/// other page can read, and the link it confirms (a signed double-submit, needing no store).
pub fn confirmation_token(cookie: &str, link: &str) -> String {
    let mut hash = Sha256::new();
    hash.update(b"moat consent confirmation\0");
    hash.update(cookie.as_bytes());
    hash.update(b"\0");
    hash.update(link.as_bytes());
    URL_SAFE_NO_PAD.encode(hash.finalize())
}

pub use crate::sandbox::network::redact::digest;

impl Consents {
    /// A new link for `principal` to give `source`'s tokens, proved as `proof` says.
    pub async fn link(
        &self,
        source: &str,
        principal: &str,
        proof: Proof,
        settings: &Settings,
    ) -> Result<Link, String> {
        let url = match proof {
            Proof::Loopback => self.upstream(source, principal, None, settings).await?,
            Proof::SignIn | Proof::Confirm => {
                let id = random::<16>()?;
                let link = Step::Link {
                    source: source.to_string(),
                    principal: principal.to_string(),
                    proof,
                };
                self.put(&id, &link).await?;
                format!("{}/oauth/consent/{id}", settings.base())
            }
        };
        Ok(Link {
            url,
            elicitation_id: random::<16>()?,
        })
    }

    /// Sends `browser` on to `source`'s authorization server for `principal`: the address, with
    /// a fresh state and PKCE challenge kept as the next step.
    pub async fn upstream(
        &self,
        source: &str,
        principal: &str,
        browser: Option<String>,
        settings: &Settings,
    ) -> Result<String, String> {
        let state = random::<16>()?;
        let (verifier, challenge) = pkce()?;
        let extra: Vec<(&str, &str)> =
            [("scope", &settings.scope), ("resource", &settings.resource)]
                .into_iter()
                .filter_map(|(name, value)| Some((name, value.as_deref()?)))
                .collect();
        let url = authorization_url(
            &settings.authorization_endpoint,
            (&settings.client_id, &settings.redirect_uri),
            (&state, &challenge),
            &extra,
        )?;
        let step = Step::Upstream {
            source: source.to_string(),
            principal: principal.to_string(),
            verifier,
            browser,
        };
        self.put(&state, &step).await?;
        Ok(url)
    }

    /// Ends a flow with the third party's `answer`: checks that it came for this source, from
    /// its issuer, to the browser the flow was bound to, then trades the code for tokens and
    /// keeps them. Gives back the source and principal connected.
    pub async fn complete(
        &self,
        http: &reqwest::Client,
        answer: Answer<'_>,
        settings: impl Fn(&str) -> Option<Settings>,
    ) -> Result<(String, String), String> {
        let used = "this link was used already, has expired, or was not made by this moat";
        let Some(Step::Upstream {
            source,
            principal,
            verifier,
            browser,
        }) = self.take(answer.state).await
        else {
            return Err(used.into());
        };
        // Each source has its own callback: an answer at another's is a mix-up (RFC 9700 §4.4).
        if source != answer.source {
            return Err(format!(
                "this answer came to the callback of \"{}\", and the link was made for \"{source}\"",
                answer.source
            ));
        }
        if let Some(bound) = &browser
            && answer.browser.map(browser_digest).as_ref() != Some(bound)
        {
            return Err(
                "this answer reached another browser than the one that began \
                        connecting, so it connects no one"
                    .into(),
            );
        }
        let settings = settings(&source)
            .ok_or_else(|| format!("the credential source \"{source}\" is no longer configured"))?;
        if let Some(issuer) = &settings.issuer
            && answer.iss != Some(issuer.as_str())
        {
            return Err(format!(
                "the answer does not name \"{source}\"'s authorization server as its issuer \
                 (RFC 9207), so it connects no one"
            ));
        }
        let tokens = endpoint::request(
            http,
            &settings,
            &[
                ("grant_type", "authorization_code"),
                ("code", answer.code),
                ("redirect_uri", &settings.redirect_uri),
                ("code_verifier", &verifier),
            ],
        )
        .await?;
        self.keep(&source, &principal, tokens).await;
        Ok((source, principal))
    }

    /// Keeps `step` under `key` for the link's lifetime, where any replica the browser comes
    /// back to finds it.
    pub async fn put(&self, key: &str, step: &Step) -> Result<(), String> {
        let bytes = serde_json::to_vec(step).map_err(|e| format!("a consent step: {e}"))?;
        self.keeping
            .put_step(key, &bytes, LINK_LIFETIME)
            .await
            .map_err(|e| e.to_string())
    }

    /// The step kept under `key`, taken: a second use, a key moat never made and one past its
    /// time are all `None`.
    pub async fn take(&self, key: &str) -> Option<Step> {
        let bytes = self.keeping.take_step(key).await;
        Self::read_step(bytes)
    }

    /// The step kept under `key`, left in place.
    pub async fn peek(&self, key: &str) -> Option<Step> {
        let bytes = self.keeping.peek_step(key).await;
        Self::read_step(bytes)
    }

    fn read_step(bytes: Result<Option<Vec<u8>>, super::KeepError>) -> Option<Step> {
        match bytes {
            Ok(bytes) => serde_json::from_slice(&bytes?).ok(),
            Err(error) => {
                tracing::warn!("a consent step could not be read: {error}");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn settings() -> Settings {
        Settings {
            authorization_endpoint: "https://id.example/auth?tenant=1".into(),
            token_endpoint: "http://127.0.0.1:9/token".into(),
            client_id: "moat".into(),
            client_secret: None,
            scope: Some("read".into()),
            resource: None,
            redirect_uri: "https://moat.example/tools/oauth/callback/tracker".into(),
            issuer: None,
            confirm_unproven: false,
        }
    }

    fn state_of(url: &str) -> (HashMap<String, String>, String) {
        let url = reqwest::Url::parse(url).unwrap();
        let query: HashMap<String, String> = url.query_pairs().into_owned().collect();
        let state = query["state"].clone();
        (query, state)
    }

    #[tokio::test]
    async fn a_link_points_at_moat_and_only_a_stdio_link_at_the_third_party() {
        let consents = Consents::default();
        for proof in [Proof::SignIn, Proof::Confirm] {
            let link = consents
                .link("tracker", "alice", proof, &settings())
                .await
                .unwrap();
            let id = link
                .url
                .strip_prefix("https://moat.example/tools/oauth/consent/")
                .unwrap_or_else(|| panic!("{proof:?} gave {}", link.url));
            match consents.peek(id).await {
                Some(Step::Link {
                    source,
                    principal,
                    proof: kept,
                }) => assert_eq!((&*source, &*principal, kept), ("tracker", "alice", proof)),
                _ => panic!("no link kept"),
            }
        }
        let stdio = consents
            .link("tracker", "me", Proof::Loopback, &settings())
            .await
            .unwrap();
        let (query, state) = state_of(&stdio.url);
        assert!(stdio.url.starts_with("https://id.example/auth?tenant=1&"));
        assert_eq!(query["code_challenge_method"], "S256");
        assert_eq!(
            query["redirect_uri"],
            "https://moat.example/tools/oauth/callback/tracker"
        );
        let Some(Step::Upstream {
            verifier, browser, ..
        }) = consents.take(&state).await
        else {
            panic!("no upstream step")
        };
        assert_eq!(browser, None);
        assert_eq!(
            query["code_challenge"],
            URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
        );
        // Once only; and a state moat never made is nothing.
        assert!(consents.take(&state).await.is_none());
        assert!(consents.take("made-up").await.is_none());
    }

    /// An answer for `state` at `source`'s callback from `browser`, naming `iss`.
    fn answer<'a>(
        source: &'a str,
        state: &'a str,
        browser: Option<&'a str>,
        iss: Option<&'a str>,
    ) -> Answer<'a> {
        Answer {
            source,
            state,
            code: "code",
            iss,
            browser,
        }
    }

    #[tokio::test]
    async fn an_answer_connects_only_the_browser_source_and_issuer_it_was_made_for() {
        let consents = Consents::default();
        crate::supply::source::install_tls_provider();
        let http = reqwest::Client::new();
        let mut with_issuer = settings();
        with_issuer.issuer = Some("https://id.example".into());
        let settings_of = |_: &str| Some(with_issuer.clone());
        let bound = |cookie: &str| Some(browser_digest(cookie));
        let refused = |result: Result<(String, String), String>| result.unwrap_err();

        let url = |browser| consents.upstream("tracker", "alice", browser, &with_issuer);
        // Another browser, or none: refused, and the state is spent.
        let (_, state) = state_of(&url(bound("mine")).await.unwrap());
        let why = refused(
            consents
                .complete(
                    &http,
                    answer(
                        "tracker",
                        &state,
                        Some("theirs"),
                        Some("https://id.example"),
                    ),
                    settings_of,
                )
                .await,
        );
        assert!(why.contains("another browser"), "{why}");
        assert!(consents.take(&state).await.is_none());
        let (_, state) = state_of(&url(bound("mine")).await.unwrap());
        let why = refused(
            consents
                .complete(
                    &http,
                    answer("tracker", &state, None, Some("https://id.example")),
                    settings_of,
                )
                .await,
        );
        assert!(why.contains("another browser"), "{why}");
        // Another source's callback: a mix-up.
        let (_, state) = state_of(&url(bound("mine")).await.unwrap());
        let why = refused(
            consents
                .complete(
                    &http,
                    answer("wiki", &state, Some("mine"), Some("https://id.example")),
                    settings_of,
                )
                .await,
        );
        assert!(
            why.contains("came to the callback of \"wiki\", and the link was made for \"tracker\""),
            "{why}"
        );
        // Another issuer, or none where one is expected.
        for iss in [Some("https://evil.example"), None] {
            let (_, state) = state_of(&url(bound("mine")).await.unwrap());
            let why = refused(
                consents
                    .complete(
                        &http,
                        answer("tracker", &state, Some("mine"), iss),
                        settings_of,
                    )
                    .await,
            );
            assert!(why.contains("RFC 9207"), "{why}");
        }
        // All of them right: it goes on to the token endpoint (which is not there).
        let (_, state) = state_of(&url(bound("mine")).await.unwrap());
        let why = refused(
            consents
                .complete(
                    &http,
                    answer("tracker", &state, Some("mine"), Some("https://id.example")),
                    settings_of,
                )
                .await,
        );
        assert!(why.contains("asking http://127.0.0.1:9/token"), "{why}");
    }

    #[test]
    fn a_confirmation_token_belongs_to_one_browser_and_one_link() {
        let token = confirmation_token("cookie", "link");
        assert_eq!(token, confirmation_token("cookie", "link"));
        assert_ne!(token, confirmation_token("other", "link"));
        assert_ne!(token, confirmation_token("cookie", "other"));
        assert_eq!(digest("x").len(), 12);
    }
}
