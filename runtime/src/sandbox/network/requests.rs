//! Requests over `wasi:http`: checked against the grants, sent by moat itself to the address it
//! checked, with the operator's header injections added on the way and taken out of the answer.

use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Result;
use http::{HeaderName, HeaderValue};
use http_body_util::BodyExt;
use wasmtime_wasi_http::io::TokioIo;
use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody, WasiHttpHooks};

use super::grant::Host;
use super::{Denial, Denials, Network, NetworkGrant, Scheme, Unsent, redact};
use crate::sandbox::host::{AskError, Client, InputRequired, Question};

/// What a request may use to find its caller's credentials.
pub(super) struct Asking<'a> {
    pub credentials: Option<&'a dyn CallCredentials>,
    pub client: Option<Arc<dyn Client>>,
    pub pending: &'a PendingInput,
}

impl Asking<'_> {
    /// The caller's credential from `source`, asking them for it if they must give it first.
    pub async fn credential(&self, source: &str) -> Result<String, Denial> {
        let Some(credentials) = self.credentials else {
            return Err(format!(
                "its credential \"{source}\" is given per caller, and this call has none"
            )
            .into());
        };
        match credentials.get(source).await {
            Ok(token) => Ok(token),
            Err(Missing::Refused(why)) => Err(why.into()),
            Err(Missing::Consent(question)) => {
                consent(
                    source,
                    question,
                    credentials,
                    self.client.clone(),
                    self.pending,
                )
                .await
            }
        }
    }
}

/// How long a connection may take when the guest sets no timeout; the call's deadline bounds
/// everything else.
const DEFAULT_CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// A header moat adds to requests for a host, so that the guest never holds the credential.
///
/// It goes only where `to` says, scheme and port included: a credential meant for
/// `https://api.example.org` never travels over plain http, nor to another port the grants
/// happen to allow.
#[derive(Clone, PartialEq)]
pub struct Injection {
    /// Always names a scheme (see [`Injection::target`]).
    pub to: NetworkGrant,
    pub header: HeaderName,
    pub value: Injected,
}

/// What an injected header holds.
#[derive(Clone, PartialEq)]
pub enum Injected {
    /// The same value for every call; marked sensitive, so that it is never logged.
    Fixed(HeaderValue),
    /// The calling principal's credential from a source of `[credentials]`, between two fixed
    /// parts: `Bearer ` and the caller's token.
    Caller {
        source: String,
        before: String,
        after: String,
    },
}

/// A call's credentials from the sources of `[credentials]`, for the principal the call acts
/// for: bound to each call by the layer that knows who is calling, so that an instance can hold
/// no one's credential but its own caller's.
pub trait CallCredentials: Send + Sync {
    /// The caller's credential from `source`, or why there is none.
    fn get<'a>(
        &'a self,
        source: &'a str,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<String, Missing>> + Send + 'a>>;

    /// The caller's credential from `source` once the caller has given it (they accepted to
    /// open the page [`Missing::Consent`] named); the call's deadline bounds the wait.
    fn consented<'a>(
        &'a self,
        source: &'a str,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<String, String>> + Send + 'a>>;

    /// The upstream refused the credential from `source` (HTTP 401): it is not to be sent again.
    fn refused<'a>(
        &'a self,
        source: &'a str,
    ) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send + 'a>>;
}

/// Where a request of a running call goes, for the caller's policy to decide on.
#[derive(Clone, Copy, Debug)]
pub struct Reached<'a> {
    pub scheme: &'a str,
    /// A name, or an IP address as text (an IPv6 one without brackets).
    pub host: &'a str,
    pub port: u16,
    pub method: &'a str,
    pub path: &'a str,
}

/// The caller's policy over the requests a call sends, asked after the plugin's grants allowed
/// one: bound to each call by the layer that knows who is calling, as [`CallCredentials`] are.
pub trait CallReach: Send + Sync {
    /// `Err(why)` when the request may not be sent.
    fn allows(&self, request: &Reached<'_>) -> Result<(), String>;
}

impl Injection {
    /// Reads where an injection goes: `[scheme://]host[:port]` as a grant writes it, except that
    /// no scheme means `https` only. Plain http must be written out (`http://127.0.0.1:8080`),
    /// and the port is the scheme's default unless named.
    pub fn target(text: &str) -> Result<NetworkGrant> {
        let mut to: NetworkGrant = text.parse()?;
        to.scheme.get_or_insert(Scheme::Https);
        Ok(to)
    }

    /// Whether some request that `grant` allows could carry this header.
    pub fn can_travel_under(&self, grant: &NetworkGrant) -> bool {
        let scheme = self.to.scheme.unwrap_or(Scheme::Https);
        (grant.host.covers(&self.to.host) || self.to.host.covers(&grant.host))
            && grant.scheme.is_none_or(|s| s == scheme)
            && match (grant.port_for(scheme), self.to.port_for(scheme)) {
                (Some(granted), Some(mine)) => granted == mine,
                _ => true,
            }
    }
}

impl fmt::Debug for Injection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Injection")
            .field("to", &self.to)
            .field("header", &self.header)
            .field("value", &self.value)
            .finish()
    }
}

impl fmt::Debug for Injected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Fixed(_) => f.write_str("<redacted>"),
            Self::Caller { source, .. } => write!(f, "${{credential:{source}}}"),
        }
    }
}

/// Why a call has no credential from a source.
#[derive(Debug)]
pub enum Missing {
    /// None to be had; the reason is shown to the caller and the audit log, and never quotes a
    /// credential.
    Refused(String),
    /// The caller can give one at a page: the URL elicitation that sends them there.
    Consent(Question),
}

/// The client's answer to a URL elicitation, by its `action`.
fn accepted(answers: &[(String, serde_json::Value)]) -> bool {
    answers
        .first()
        .is_some_and(|(_, answer)| answer["action"] == "accept")
}

/// A credential the caller must give first: asks the call's client to send them to the page,
/// then waits for it. A 2026-07-28 client is asked by ending the call with `input_required`
/// (`pending`); a client that cannot be asked gets the page in the error.
async fn consent(
    source: &str,
    question: Question,
    credentials: &dyn CallCredentials,
    client: Option<Arc<dyn Client>>,
    pending: &PendingInput,
) -> Result<String, Denial> {
    let url = question.params["url"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    // The link goes to the caller only: whoever reads a log may not finish it.
    let go = |why: &str| {
        let text = |link: &str| {
            format!(
                "the credential \"{source}\" needs the caller to connect their account ({why}): \
                 open {link} , then call again"
            )
        };
        Denial {
            shown: text(&url),
            recorded: text(&format!(
                "the link given to the caller (sha256 {})",
                redact::digest(&url)
            )),
        }
    };
    let Some(client) = client else {
        return Err(go("this request cannot ask the client anything"));
    };
    let elicitation = question.params["elicitationId"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    match client.clone().ask(vec![question]).await {
        Ok(answers) if accepted(&answers) => {
            let credential = credentials.consented(source).await.map_err(Denial::from)?;
            client.elicitation_complete(&elicitation).await;
            Ok(credential)
        }
        Ok(_) => Err(format!(
            "the caller declined to connect their account for the credential \"{source}\""
        )
        .into()),
        Err(AskError::InputRequired(input)) => {
            pending.set(input);
            Err(format!(
                "the credential \"{source}\" waits for the caller to connect their account"
            )
            .into())
        }
        Err(AskError::MissingCapability(missing)) => Err(go(&missing.to_string())),
        Err(AskError::Refused(why)) => Err(go(&why)),
    }
}

/// The questions a call's requests left for the client: they end the call with
/// `input_required` whatever the guest made of its refused request.
#[derive(Clone, Default)]
pub struct PendingInput(Arc<std::sync::Mutex<Option<InputRequired>>>);

impl PendingInput {
    fn set(&self, input: InputRequired) {
        let mut pending = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match &mut *pending {
            Some(InputRequired(questions)) => {
                for question in input.0 {
                    if !questions.iter().any(|q| q.key == question.key) {
                        questions.push(question);
                    }
                }
            }
            none => *none = Some(input),
        }
    }

    pub fn take(&self) -> Option<InputRequired> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

/// moat's `wasi:http` hooks: every outgoing request is checked against the plugin's grants,
/// gets its injected headers, and goes to the address that was checked.
pub struct HttpHooks {
    pub plugin: Arc<str>,
    pub network: Arc<Network>,
    pub denials: Denials,
    /// The current call's caller's credentials; none between calls.
    pub credentials: Option<Arc<dyn CallCredentials>>,
    /// The current call's caller's policy over where its requests go; none between calls and
    /// when no policy is given.
    pub reach: Option<Arc<dyn CallReach>>,
    /// Whom the current call may ask, for a credential the caller must give first.
    pub client: Option<Arc<dyn Client>>,
    pub pending: PendingInput,
}

type SendResult = Result<
    (
        http::Response<WasiBody>,
        Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ),
    HttpError,
>;

impl WasiHttpHooks for HttpHooks {
    fn send_request(
        &mut self,
        mut request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        _request_io: Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ) -> Box<dyn Future<Output = SendResult> + Send> {
        let plugin = self.plugin.clone();
        let network = self.network.clone();
        let denials = self.denials.clone();
        let credentials = self.credentials.clone();
        let reach = self.reach.clone();
        let (client, pending) = (self.client.clone(), self.pending.clone());
        Box::new(async move {
            let checked = match check_method(request.method(), &plugin) {
                Ok(()) => network.check_request(request.uri(), &plugin).await,
                Err(message) => Err(Unsent::Denied(message)),
            };
            let (target, addrs) = match checked {
                Ok(checked) => checked,
                Err(Unsent::Denied(message)) => {
                    denials.record(message);
                    return Err(HttpError::HttpRequestDenied);
                }
                Err(Unsent::NoAddress(message)) => {
                    tracing::info!(plugin = &*plugin, "{message}");
                    return Err(HttpError::DnsError {
                        rcode: None,
                        info_code: None,
                    });
                }
            };
            if let Some(reach) = &reach {
                let host = match &target.host {
                    Host::Name(name) => name.clone(),
                    Host::Ip(ip) => ip.to_string(),
                };
                let reached = Reached {
                    scheme: target.scheme.name(),
                    host: &host,
                    port: target.port,
                    method: request.method().as_str(),
                    path: request.uri().path(),
                };
                if let Err(why) = reach.allows(&reached) {
                    denials.record(format!("network access to {target} denied: {why}"));
                    return Err(HttpError::HttpRequestDenied);
                }
            }
            let asking = Asking {
                credentials: credentials.as_deref(),
                client,
                pending: &pending,
            };
            let added = match network.inject(&target, request.headers_mut(), asking).await {
                Ok(added) => added,
                Err(why) => {
                    denials
                        .record(why.map(|why| format!("network access to {target} denied: {why}")));
                    return Err(HttpError::HttpRequestDenied);
                }
            };
            if !added.secrets.is_empty() {
                redact::request(request.headers_mut());
            }
            let uri = request.uri().clone();
            let (response, io) = send(request, &addrs, &uri, options).await?;
            if response.status() == http::StatusCode::UNAUTHORIZED
                && let Some(credentials) = &credentials
            {
                for source in &added.sources {
                    credentials.refused(source).await;
                }
            }
            match redact::response(response, added.secrets) {
                Ok(response) => Ok((response, io)),
                Err(why) => {
                    denials.record(format!("network access to {target} denied: {why}"));
                    Err(HttpError::HttpRequestDenied)
                }
            }
        })
    }
}

/// Refuses the methods no tool needs and that turn a server against its client: `TRACE`
/// echoes the request back, injected credentials included, and `CONNECT` makes the server a
/// tunnel to wherever the guest likes.
pub(super) fn check_method(method: &http::Method, plugin: &str) -> Result<(), String> {
    if method == http::Method::TRACE || method == http::Method::CONNECT {
        return Err(format!(
            "network access denied: the {method} method is never allowed (plugin \"{plugin}\")"
        ));
    }
    Ok(())
}

/// Sends `request` over a connection to the first of `addrs` that answers: never to an address
/// that was not checked.
async fn send(
    mut request: http::Request<WasiBody>,
    addrs: &[SocketAddr],
    uri: &http::Uri,
    options: Option<RequestOptions>,
) -> SendResult {
    let connect_timeout = options
        .and_then(|o| o.connect_timeout)
        .unwrap_or(DEFAULT_CONNECT_TIMEOUT);
    let mut last_error = HttpError::DestinationNotFound;
    let mut stream = None;
    for addr in addrs {
        match tokio::time::timeout(connect_timeout, tokio::net::TcpStream::connect(addr)).await {
            Ok(Ok(s)) => {
                stream = Some(s);
                break;
            }
            Ok(Err(e)) => last_error = HttpError::Connect(e),
            Err(_) => last_error = HttpError::ConnectionTimeout,
        }
    }
    let stream = stream.ok_or(last_error)?;

    // The request line holds only the path: the scheme and host are in the URI for the hooks.
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    *request.uri_mut() = http::Uri::try_from(path).map_err(|_| HttpError::HttpRequestUriInvalid)?;

    let (mut sender, connection) = if uri.scheme_str() == Some("https") {
        let host = uri.host().unwrap_or_default();
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let name = rustls::pki_types::ServerName::try_from(host.to_string())?;
        let tls = tokio_rustls::TlsConnector::from(tls_config())
            .connect(name, stream)
            .await
            .map_err(HttpError::Tls)?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
        (sender, wasmtime_wasi::runtime::spawn(connection))
    } else {
        let (sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        (sender, wasmtime_wasi::runtime::spawn(connection))
    };
    let response = sender.send_request(request).await?;
    let response = response.map(|body| body.map_err(HttpError::from).boxed_unsync());
    let io = async move { connection.await.map_err(HttpError::from) };
    Ok((response, Box::new(io)))
}

/// The TLS client set-up: the Mozilla roots, built once.
fn tls_config() -> Arc<rustls::ClientConfig> {
    static CONFIG: std::sync::OnceLock<Arc<rustls::ClientConfig>> = std::sync::OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let roots = rustls::RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.into(),
            };
            Arc::new(
                rustls::ClientConfig::builder_with_provider(Arc::new(
                    rustls::crypto::ring::default_provider(),
                ))
                .with_safe_default_protocol_versions()
                .expect("ring supports the default protocol versions")
                .with_root_certificates(roots)
                .with_no_client_auth(),
            )
        })
        .clone()
}
