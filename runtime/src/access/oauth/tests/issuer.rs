//! An authorization server on loopback for the tests: its metadata, a key set and an
//! introspection endpoint, each counting the requests it gets. Its RSA keys come from `openssl`,
//! once per test run.

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};

use crate::access::oauth::{OAuth, Settings, introspection};

/// The resource the tests' tokens are for.
pub const AUDIENCE: &str = "https://tools.example.com/mcp";

/// An RSA signing key and what the issuer publishes of it.
pub struct Key {
    pub kid: String,
    pub encoding: EncodingKey,
    /// The public key, PEM: what an attacker has.
    pub public_pem: Vec<u8>,
    pub jwk: Value,
}

fn openssl(args: &[&str], input: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut child = Command::new("openssl")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("openssl runs");
    child.stdin.take().unwrap().write_all(input).unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "openssl {args:?}");
    output.stdout
}

fn new_key(kid: &str) -> Key {
    let private = openssl(
        &[
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
        ],
        b"",
    );
    let der = openssl(&["rsa", "-traditional", "-outform", "DER"], &private);
    let public_pem = openssl(&["rsa", "-pubout"], &private);
    let modulus = String::from_utf8(openssl(&["rsa", "-noout", "-modulus"], &private)).unwrap();
    let hex = modulus.trim().strip_prefix("Modulus=").unwrap();
    let n: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect();
    Key {
        kid: kid.into(),
        encoding: EncodingKey::from_rsa_der(&der),
        public_pem,
        jwk: json!({"kty": "RSA", "kid": kid, "alg": "RS256", "use": "sig",
                    "n": URL_SAFE_NO_PAD.encode(n), "e": "AQAB"}),
    }
}

/// Two keys, made once.
pub fn keys() -> &'static [Key; 2] {
    static KEYS: OnceLock<[Key; 2]> = OnceLock::new();
    KEYS.get_or_init(|| [new_key("one"), new_key("two")])
}

pub fn now() -> u64 {
    jsonwebtoken::get_current_timestamp()
}

/// What the issuer does, as the test sets it.
pub struct Behaviour {
    /// Whether the metadata is served (else 503).
    pub metadata_up: AtomicBool,
    /// The key set's body, or (when `endless`) chunks of spaces that never end, without a length.
    pub jwks: Mutex<String>,
    pub endless_jwks: AtomicBool,
    /// Introspection answers by token; any other token is not active.
    pub answers: Mutex<HashMap<String, Value>>,
    pub metadata_hits: AtomicUsize,
    pub jwks_hits: AtomicUsize,
    pub introspection_hits: AtomicUsize,
}

pub struct Issuer {
    pub url: String,
    pub behaviour: Arc<Behaviour>,
}

impl Issuer {
    /// An issuer publishing `keys`.
    pub async fn start(keys: &[&Key]) -> Self {
        let jwks = json!({"keys": keys.iter().map(|k| k.jwk.clone()).collect::<Vec<_>>()});
        let behaviour = Arc::new(Behaviour {
            metadata_up: AtomicBool::new(true),
            jwks: Mutex::new(jwks.to_string()),
            endless_jwks: AtomicBool::new(false),
            answers: Mutex::default(),
            metadata_hits: AtomicUsize::new(0),
            jwks_hits: AtomicUsize::new(0),
            introspection_hits: AtomicUsize::new(0),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let router = Router::new()
            .route("/.well-known/oauth-authorization-server", get(metadata))
            .route("/.well-known/openid-configuration", get(metadata))
            .route("/jwks", get(jwks_handler))
            .route("/introspect", post(introspect))
            .with_state((url.clone(), behaviour.clone()));
        tokio::spawn(async move { axum::serve(listener, router).await });
        Self { url, behaviour }
    }

    /// What moat is configured with for this issuer: no leeway, introspection as `moat`.
    pub fn settings(&self) -> Settings {
        Settings {
            issuer: self.url.clone(),
            audience: AUDIENCE.into(),
            required_scopes: Vec::new(),
            jwks_uri: None,
            introspection: Some(introspection::Client {
                endpoint: None,
                client_id: "moat".into(),
                client_secret: "moat-secret".into(),
                cache: Duration::from_secs(30),
                max_per_second: introspection::DEFAULT_MAX_PER_SECOND,
            }),
            sign_in: None,
            leeway: Duration::ZERO,
            jwks_cooldown: Duration::from_secs(60),
        }
    }

    pub fn oauth(&self) -> OAuth {
        OAuth::new(self.settings()).unwrap()
    }

    /// Claims a good token has: this issuer, this resource, five minutes to live.
    pub fn claims(&self) -> Value {
        json!({"iss": self.url, "aud": AUDIENCE, "sub": "alice", "client_id": "app",
               "iat": now(), "exp": now() + 300, "scope": "tools"})
    }

    /// An opaque token the introspection endpoint answers `answer` for.
    pub fn opaque(&self, token: &str, answer: Value) -> String {
        let answers = &self.behaviour.answers;
        answers.lock().unwrap().insert(token.into(), answer);
        token.into()
    }

    /// An introspection answer for a good token.
    pub fn active(&self) -> Value {
        let mut answer = self.claims();
        answer["active"] = json!(true);
        answer
    }

    pub fn hits(&self, counter: fn(&Behaviour) -> &AtomicUsize) -> usize {
        counter(&self.behaviour).load(Ordering::SeqCst)
    }
}

/// `claims` signed by `key`, naming it as its `kid`.
pub fn sign(key: &Key, claims: &Value) -> String {
    let mut header = Header::new(Algorithm::RS256);
    header.kid = Some(key.kid.clone());
    jsonwebtoken::encode(&header, claims, &key.encoding).unwrap()
}

/// A JWT put together by hand: any header, any signature.
pub fn forge(header: &Value, claims: &Value, signature: &[u8]) -> String {
    let part = |value: &Value| URL_SAFE_NO_PAD.encode(value.to_string());
    format!(
        "{}.{}.{}",
        part(header),
        part(claims),
        URL_SAFE_NO_PAD.encode(signature)
    )
}

type Shared = (String, Arc<Behaviour>);

async fn metadata(State((url, behaviour)): State<Shared>) -> Response {
    behaviour.metadata_hits.fetch_add(1, Ordering::SeqCst);
    if !behaviour.metadata_up.load(Ordering::SeqCst) {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    let body = json!({"issuer": url, "jwks_uri": format!("{url}/jwks"),
                      "introspection_endpoint": format!("{url}/introspect")});
    (
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

async fn jwks_handler(State((_, behaviour)): State<Shared>) -> Response {
    behaviour.jwks_hits.fetch_add(1, Ordering::SeqCst);
    if behaviour.endless_jwks.load(Ordering::SeqCst) {
        let spaces = || Ok::<_, std::io::Error>(vec![b' '; 64 << 10]);
        return Body::from_stream(futures_util::stream::repeat_with(spaces)).into_response();
    }
    let body = behaviour.jwks.lock().unwrap().clone();
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

async fn introspect(State((_, behaviour)): State<Shared>, form: String) -> Response {
    behaviour.introspection_hits.fetch_add(1, Ordering::SeqCst);
    // The tests' tokens need no percent-decoding.
    let token = form
        .split('&')
        .find_map(|pair| pair.strip_prefix("token="))
        .unwrap_or_default();
    let answer = behaviour.answers.lock().unwrap().get(token).cloned();
    let answer = answer.unwrap_or_else(|| json!({"active": false}));
    (
        [(header::CONTENT_TYPE, "application/json")],
        answer.to_string(),
    )
        .into_response()
}
