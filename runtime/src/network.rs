//! Network grants: which hosts a plugin may reach, and the address rules that keep it off the
//! host's own network.
//!
//! A grant names a scheme, a host and a port: `https://api.open-meteo.com`,
//! `*.wikipedia.org:443`, `http://127.0.0.1:8080`. Over `wasi:http` a request must match a grant
//! by scheme, host and port; then moat resolves the name itself and checks every address it
//! resolves to. Addresses of the host's own networks (loopback, private, link-local, shared,
//! multicast, unspecified, and IPv6 spellings of them) are refused unless the matching grant
//! names that very address as an IP literal, and moat connects to the address it checked, so a
//! name that resolves differently the second time (DNS rebinding) gains nothing. Redirects are
//! not followed by `wasi:http`: a guest that follows one makes a new request, checked anew.
//!
//! Over `wasi:sockets` moat sees only IP addresses, so only grants whose host is an IP literal
//! apply: a TCP connection must go to such an address and port. UDP, listening and binding to a
//! chosen address are never granted, and neither is name lookup: no socket grant names a host, and
//! `wasi:http` resolves names on the host. A plugin with no IP-literal grant cannot even create a
//! TCP socket, so it holds no descriptor of the host that way.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::str::FromStr;
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result, bail};
use http::{HeaderName, HeaderValue};
use http_body_util::BodyExt;
use wasmtime_wasi::sockets::SocketAddrUse;
use wasmtime_wasi_http::io::TokioIo;
use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody, WasiHttpHooks};

use crate::guest_log::{GuestLog, Severity};

/// How long a connection may take when the guest sets no timeout; the call's deadline bounds
/// everything else.
const DEFAULT_CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The URL schemes a grant may name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    Http,
    Https,
}

impl Scheme {
    fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }
}

/// The host part of a grant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostPattern {
    /// One host name, lowercase.
    Name(String),
    /// `*.example.org`: any name ending in `.example.org` (not `example.org` itself).
    Subdomains(String),
    /// An IP literal: the only way to grant an address of the host's own networks.
    Ip(IpAddr),
    /// `*`: any host; useful as a policy ceiling. Addresses of the host's own networks still
    /// need a grant naming them.
    Any,
}

impl HostPattern {
    fn matches(&self, host: &Host) -> bool {
        match (self, host) {
            (HostPattern::Name(name), Host::Name(host)) => name == host,
            (HostPattern::Subdomains(suffix), Host::Name(host)) => host
                .strip_suffix(suffix.as_str())
                .is_some_and(|prefix| !prefix.is_empty()),
            (HostPattern::Ip(ip), Host::Ip(host)) => ip.to_canonical() == host.to_canonical(),
            (HostPattern::Any, _) => true,
            _ => false,
        }
    }
}

impl HostPattern {
    /// Whether every host `other` matches, this matches too.
    pub fn covers(&self, other: &HostPattern) -> bool {
        match other {
            HostPattern::Name(name) => self.matches(&Host::Name(name.clone())),
            HostPattern::Ip(ip) => self.matches(&Host::Ip(*ip)),
            HostPattern::Subdomains(theirs) => match self {
                HostPattern::Subdomains(mine) => theirs.ends_with(mine.as_str()),
                HostPattern::Any => true,
                _ => false,
            },
            HostPattern::Any => *self == HostPattern::Any,
        }
    }
}

impl FromStr for HostPattern {
    type Err = anyhow::Error;

    fn from_str(text: &str) -> Result<Self> {
        if text == "*" {
            Ok(HostPattern::Any)
        } else if let Some(suffix) = text.strip_prefix("*.") {
            match parse_host(suffix)? {
                Host::Name(name) => Ok(HostPattern::Subdomains(format!(".{name}"))),
                Host::Ip(_) => bail!("`*.` goes with host names, not IP addresses"),
            }
        } else {
            Ok(match parse_host(text)? {
                Host::Name(name) => HostPattern::Name(name),
                Host::Ip(ip) => HostPattern::Ip(ip),
            })
        }
    }
}

/// The port part of a grant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortPattern {
    /// The scheme's default port (80 for http, 443 for https).
    Default,
    Exact(u16),
    /// `:*`, any port.
    Any,
}

/// One entry of a plugin's `network` list (also of a manifest's request and a policy's ceiling).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct NetworkGrant {
    /// `None`: http and https alike.
    pub scheme: Option<Scheme>,
    pub host: HostPattern,
    pub port: PortPattern,
}

impl NetworkGrant {
    /// Whether every request `other` allows, this grant allows too.
    pub fn covers(&self, other: &NetworkGrant) -> bool {
        let schemes = match other.scheme {
            Some(scheme) => vec![scheme],
            None => vec![Scheme::Http, Scheme::Https],
        };
        self.host.covers(&other.host)
            && schemes.into_iter().all(|scheme| {
                self.scheme.is_none_or(|s| s == scheme)
                    && match (self.port_for(scheme), other.port_for(scheme)) {
                        (None, _) => true,
                        (Some(mine), theirs) => theirs == Some(mine),
                    }
            })
    }

    /// The one port this grant allows with `scheme`, or `None` for any port.
    fn port_for(&self, scheme: Scheme) -> Option<u16> {
        match self.port {
            PortPattern::Default => Some(scheme.default_port()),
            PortPattern::Exact(port) => Some(port),
            PortPattern::Any => None,
        }
    }

    fn matches(&self, target: &Target) -> bool {
        self.scheme.is_none_or(|s| s == target.scheme)
            && self.host.matches(&target.host)
            && self
                .port_for(target.scheme)
                .is_none_or(|p| p == target.port)
    }

    /// Whether a raw TCP connection to `addr` is granted: only IP-literal grants apply.
    fn allows_socket(&self, addr: SocketAddr) -> bool {
        let HostPattern::Ip(ip) = self.host else {
            return false;
        };
        if ip.to_canonical() != addr.ip().to_canonical() {
            return false;
        }
        match self.port {
            PortPattern::Default => match self.scheme {
                Some(scheme) => scheme.default_port() == addr.port(),
                None => matches!(addr.port(), 80 | 443),
            },
            PortPattern::Exact(p) => p == addr.port(),
            PortPattern::Any => true,
        }
    }
}

impl FromStr for NetworkGrant {
    type Err = anyhow::Error;

    /// `[scheme://]host[:port]`, where host may start with `*.` and port may be `*`.
    fn from_str(text: &str) -> Result<Self> {
        let (scheme, rest) = match text.split_once("://") {
            Some(("http", rest)) => (Some(Scheme::Http), rest),
            Some(("https", rest)) => (Some(Scheme::Https), rest),
            Some((other, _)) => bail!("scheme `{other}` is not http or https"),
            None => (None, text),
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains(['/', '?', '#', '@']) {
            bail!("a grant names a scheme, a host and a port, not a path or user");
        }
        let (host, port) = split_host_port(rest)?;
        let port = match port {
            None => PortPattern::Default,
            Some("*") => PortPattern::Any,
            Some(p) => PortPattern::Exact(
                p.parse()
                    .ok()
                    .filter(|&p| p != 0)
                    .with_context(|| format!("port `{p}` is not a number from 1 to 65535"))?,
            ),
        };
        Ok(Self {
            scheme,
            host: host.parse()?,
            port,
        })
    }
}

impl TryFrom<String> for NetworkGrant {
    type Error = String;

    fn try_from(text: String) -> Result<Self, String> {
        text.parse()
            .map_err(|e: anyhow::Error| format!("network entry \"{text}\": {e:#}"))
    }
}

impl From<NetworkGrant> for String {
    fn from(grant: NetworkGrant) -> String {
        grant.to_string()
    }
}

impl fmt::Display for NetworkGrant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(scheme) = self.scheme {
            write!(f, "{}://", scheme.name())?;
        }
        match &self.host {
            HostPattern::Name(name) => f.write_str(name)?,
            HostPattern::Subdomains(suffix) => write!(f, "*{suffix}")?,
            HostPattern::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]")?,
            HostPattern::Ip(ip) => write!(f, "{ip}")?,
            HostPattern::Any => f.write_str("*")?,
        }
        match self.port {
            PortPattern::Default => Ok(()),
            PortPattern::Exact(p) => write!(f, ":{p}"),
            PortPattern::Any => f.write_str(":*"),
        }
    }
}

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
    /// Marked sensitive, so that it is never logged.
    pub value: HeaderValue,
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
            .field("value", &"<redacted>")
            .finish()
    }
}

/// Looks up the addresses of a host name. Injectable, so that tests can make a name resolve
/// wherever they like; moat itself uses the system's resolver.
pub trait Resolve: Send + Sync + 'static {
    fn resolve(
        &self,
        host: &str,
        port: u16,
    ) -> Pin<Box<dyn Future<Output = std::io::Result<Vec<SocketAddr>>> + Send + 'static>>;
}

/// The resolver a plugin's requests use.
#[derive(Clone)]
pub struct Resolver(Arc<dyn Resolve>);

impl Resolver {
    pub fn new(resolve: impl Resolve) -> Self {
        Self(Arc::new(resolve))
    }

    /// A resolver that knows only the names in `table`: a fixed `/etc/hosts` of its own.
    pub fn table(table: impl IntoIterator<Item = (String, Vec<IpAddr>)>) -> Self {
        Self::new(Table(table.into_iter().collect()))
    }
}

impl Default for Resolver {
    /// The system's resolver, one for the whole process, so that grants read twice compare
    /// equal.
    fn default() -> Self {
        static SYSTEM: std::sync::OnceLock<Resolver> = std::sync::OnceLock::new();
        SYSTEM.get_or_init(|| Self::new(System)).clone()
    }
}

impl fmt::Debug for Resolver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Resolver")
    }
}

impl PartialEq for Resolver {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

struct System;

impl Resolve for System {
    fn resolve(
        &self,
        host: &str,
        port: u16,
    ) -> Pin<Box<dyn Future<Output = std::io::Result<Vec<SocketAddr>>> + Send + 'static>> {
        let host = host.to_string();
        Box::pin(async move { Ok(tokio::net::lookup_host((host, port)).await?.collect()) })
    }
}

struct Table(HashMap<String, Vec<IpAddr>>);

impl Resolve for Table {
    fn resolve(
        &self,
        host: &str,
        port: u16,
    ) -> Pin<Box<dyn Future<Output = std::io::Result<Vec<SocketAddr>>> + Send + 'static>> {
        let found = self.0.get(host).map(|ips| {
            ips.iter()
                .map(|&ip| SocketAddr::new(ip, port))
                .collect::<Vec<_>>()
        });
        Box::pin(async move {
            found.ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "unknown host"))
        })
    }
}

/// Everything a plugin may reach on the network, and the headers moat adds on the way.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Network {
    pub grants: Vec<NetworkGrant>,
    pub inject: Vec<Injection>,
    pub resolver: Resolver,
}

/// Where a request or connection goes.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Target {
    scheme: Scheme,
    host: Host,
    port: u16,
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            Host::Name(name) => write!(f, "{name}:{}", self.port),
            Host::Ip(ip) => write!(f, "{}", SocketAddr::new(*ip, self.port)),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Host {
    Name(String),
    Ip(IpAddr),
}

impl Network {
    /// Whether anything at all is granted.
    pub fn is_empty(&self) -> bool {
        self.grants.is_empty()
    }

    /// Whether some raw TCP connection is granted: only grants naming an IP address allow one.
    pub fn grants_sockets(&self) -> bool {
        self.grants
            .iter()
            .any(|g| matches!(g.host, HostPattern::Ip(_)))
    }

    /// Checks a request for `uri`: the addresses it may connect to, or why it is denied.
    async fn check_request(
        &self,
        uri: &http::Uri,
        plugin: &str,
    ) -> Result<(Target, Vec<SocketAddr>), String> {
        let scheme = match uri.scheme_str() {
            Some("http") => Scheme::Http,
            Some("https") => Scheme::Https,
            other => {
                return Err(format!(
                    "network access denied: scheme {other:?} is not http or https"
                ));
            }
        };
        let authority = uri.authority().map(|a| a.as_str()).unwrap_or_default();
        let denied = |what: &dyn fmt::Display, why: String| {
            format!("network access to {what} denied: {why}")
        };
        let (host, port) =
            split_host_port(authority).map_err(|e| denied(&authority, format!("{e:#}")))?;
        let host = parse_host(host).map_err(|e| denied(&authority, format!("{e:#}")))?;
        let port = match port {
            None => scheme.default_port(),
            Some(p) => p
                .parse()
                .map_err(|_| denied(&authority, format!("port `{p}` is not a number")))?,
        };
        let target = Target { scheme, host, port };
        let Some(grant) = self.grants.iter().find(|g| g.matches(&target)) else {
            return Err(denied(
                &target,
                format!("not granted to plugin \"{plugin}\""),
            ));
        };
        let addrs = match &target.host {
            Host::Ip(ip) => vec![SocketAddr::new(*ip, port)],
            Host::Name(name) => self
                .resolver
                .0
                .resolve(name, port)
                .await
                .map_err(|e| denied(&target, format!("resolving the name failed: {e}")))?,
        };
        if addrs.is_empty() {
            return Err(denied(&target, "the name resolves to no address".into()));
        }
        for addr in &addrs {
            let ip = addr.ip().to_canonical();
            let named = matches!(grant.host, HostPattern::Ip(g) if g.to_canonical() == ip);
            if let Some(kind) = reserved(ip)
                && !named
            {
                let via = match &target.host {
                    Host::Name(_) => format!("it resolves to {ip}, "),
                    Host::Ip(_) => String::new(),
                };
                return Err(denied(
                    &target,
                    format!(
                        "{via}{kind}, which only a grant naming that IP address allows \
                         (plugin \"{plugin}\")"
                    ),
                ));
            }
        }
        let addrs = addrs
            .into_iter()
            .map(|a| SocketAddr::new(a.ip().to_canonical(), a.port()))
            .collect();
        Ok((target, addrs))
    }

    /// Checks one use of a socket address by `wasi:sockets`; `Err` says why it is denied.
    pub fn check_socket(
        &self,
        addr: SocketAddr,
        use_: SocketAddrUse,
        plugin: &str,
    ) -> Result<(), String> {
        match use_ {
            SocketAddrUse::TcpConnect => {
                if self.grants.iter().any(|g| g.allows_socket(addr)) {
                    Ok(())
                } else {
                    Err(format!(
                        "network access to {addr} denied: not granted to plugin \"{plugin}\" \
                         (raw TCP needs a grant naming the IP address)"
                    ))
                }
            }
            // The implicit bind before a connection: any local address, a port the OS picks.
            SocketAddrUse::TcpBind if addr.ip().is_unspecified() && addr.port() == 0 => Ok(()),
            SocketAddrUse::TcpBind | SocketAddrUse::TcpListen | SocketAddrUse::TcpAccept => {
                Err(format!(
                    "listening on {addr} denied: plugins may not accept connections (plugin \"{plugin}\")"
                ))
            }
            SocketAddrUse::UdpBind | SocketAddrUse::UdpSend | SocketAddrUse::UdpReceive => Err(
                format!("UDP to or from {addr} denied: UDP is never granted (plugin \"{plugin}\")"),
            ),
        }
    }

    fn inject(&self, target: &Target, headers: &mut http::HeaderMap) {
        for injection in self.inject.iter().filter(|i| i.to.matches(target)) {
            headers.insert(injection.header.clone(), injection.value.clone());
        }
    }
}

/// The denials of one call, shared by the hooks that record them and the call that reports them.
#[derive(Clone, Debug, Default)]
pub struct Denials {
    list: Arc<Mutex<Vec<String>>>,
    /// Where each new denial is logged; none for a call that has no instance yet.
    log: Option<Arc<GuestLog>>,
}

impl Denials {
    pub fn new(log: Arc<GuestLog>) -> Self {
        Self {
            list: Arc::default(),
            log: Some(log),
        }
    }

    /// Records a denial and logs it, once per call, within the plugin's log budget: a guest
    /// retrying in a loop grows neither the list nor the log.
    pub fn record(&self, message: String) {
        let mut denials = self.list.lock().unwrap_or_else(|e| e.into_inner());
        if denials.contains(&message) {
            return;
        }
        if let Some(log) = &self.log {
            log.write(Severity::Warning, &message);
        }
        if denials.len() < 32 {
            denials.push(message);
        }
    }

    pub fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.list.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// moat's `wasi:http` hooks: every outgoing request is checked against the plugin's grants,
/// gets its injected headers, and goes to the address that was checked.
pub struct HttpHooks {
    pub plugin: Arc<str>,
    pub network: Arc<Network>,
    pub denials: Denials,
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
        Box::new(async move {
            let checked = match check_method(request.method(), &plugin) {
                Ok(()) => network.check_request(request.uri(), &plugin).await,
                Err(message) => Err(message),
            };
            let (target, addrs) = match checked {
                Ok(checked) => checked,
                Err(message) => {
                    denials.record(message);
                    return Err(HttpError::HttpRequestDenied);
                }
            };
            network.inject(&target, request.headers_mut());
            let uri = request.uri().clone();
            send(request, &addrs, &uri, options).await
        })
    }
}

/// Refuses the methods no tool needs and that turn a server against its client: `TRACE`
/// echoes the request back, injected credentials included, and `CONNECT` makes the server a
/// tunnel to wherever the guest likes.
fn check_method(method: &http::Method, plugin: &str) -> Result<(), String> {
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

/// Splits `host[:port]`, where an IPv6 host is in brackets.
fn split_host_port(text: &str) -> Result<(&str, Option<&str>)> {
    if let Some(rest) = text.strip_prefix('[') {
        let (host, after) = rest.split_once(']').context("`[` without `]`")?;
        match after {
            "" => Ok((host, None)),
            _ => Ok((
                host,
                Some(after.strip_prefix(':').context("junk after `]`")?),
            )),
        }
    } else {
        match text.split_once(':') {
            Some((host, port)) => Ok((host, Some(port))),
            None => Ok((text, None)),
        }
    }
}

/// A host as moat compares it: an IP address, or a lowercase name without a trailing dot.
/// Spellings that resolvers read as IP addresses but that are not the canonical form
/// (`2130706433`, `0177.0.0.1`, `0x7f.1`) are refused, so no name can hide an address.
fn parse_host(text: &str) -> Result<Host> {
    let text = text.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Ok(Host::Ip(ip));
    }
    let name = text.strip_suffix('.').unwrap_or(text).to_ascii_lowercase();
    if name.is_empty() {
        bail!("the host is empty");
    }
    let last = name.rsplit('.').next().unwrap_or_default();
    let numeric = last.bytes().all(|b| b.is_ascii_digit())
        || (last.starts_with("0x") && last[2..].bytes().all(|b| b.is_ascii_hexdigit()));
    if numeric {
        bail!("`{text}` is not a canonical IP address (write IPv4 as four decimal numbers)");
    }
    if !name.split('.').all(|label| {
        !label.is_empty()
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    }) {
        bail!("`{text}` is not a valid host name");
    }
    Ok(Host::Name(name))
}

/// What kind of address of the host's own networks (or no network at all) `ip` is, or `None`
/// for an ordinary public address. `ip` is canonical: IPv4-mapped IPv6 is IPv4 already.
fn reserved(ip: IpAddr) -> Option<String> {
    match ip {
        IpAddr::V4(ip) => reserved_v4(ip).map(str::to_string),
        IpAddr::V6(ip) => reserved_v6(ip),
    }
}

fn reserved_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    Some(match (a, b, c) {
        (0, ..) => "an unspecified address",
        (127, ..) => "a loopback address",
        (10, ..) | (172, 16..=31, _) | (192, 168, _) => "a private address",
        (100, 64..=127, _) => "a shared (carrier-grade NAT) address",
        (169, 254, _) => "a link-local address",
        (192, 0, 0) => "an IETF protocol address",
        (192, 0, 2) | (198, 51, 100) | (203, 0, 113) => "a documentation address",
        (198, 18..=19, _) => "a benchmarking address",
        (224..=239, ..) => "a multicast address",
        (240..=255, ..) => "a reserved or broadcast address",
        _ => return None,
    })
}

fn reserved_v6(ip: Ipv6Addr) -> Option<String> {
    let segments = ip.segments();
    let embedded_v4 = |high: u16, low: u16| Ipv4Addr::from(((high as u32) << 16) | low as u32);
    let inner =
        |what: &str, v4: Ipv4Addr| reserved_v4(v4).map(|kind| format!("{what} for {v4}, {kind}"));
    let kind = match segments {
        [0, 0, 0, 0, 0, 0, 0, 0] => "an unspecified address",
        [0, 0, 0, 0, 0, 0, 0, 1] => "a loopback address",
        [0, 0, 0, 0, 0, 0, ..] => "an IPv4-compatible address (deprecated)",
        [0x64, 0xff9b, 0, 0, 0, 0, high, low] => {
            return inner("a NAT64 address", embedded_v4(high, low));
        }
        [0x64, 0xff9b, 1, ..] => "a local-use NAT64 address",
        [0x2002, high, low, ..] => return inner("a 6to4 address", embedded_v4(high, low)),
        [0x2001, 0, ..] => "a Teredo address",
        [0x2001, 0xdb8, ..] => "a documentation address",
        [0x100, 0, 0, 0, ..] => "a discard-only address",
        [first, ..] if first & 0xfe00 == 0xfc00 => "a unique local (private) address",
        [first, ..] if first & 0xffc0 == 0xfe80 => "a link-local address",
        [first, ..] if first & 0xffc0 == 0xfec0 => "a site-local address (deprecated)",
        [first, ..] if first & 0xff00 == 0xff00 => "a multicast address",
        _ => return None,
    };
    Some(kind.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grants(list: &[&str]) -> Network {
        Network {
            grants: list.iter().map(|g| g.parse().unwrap()).collect(),
            ..Network::default()
        }
    }

    fn with_resolver(mut network: Network, table: &[(&str, &str)]) -> Network {
        network.resolver = Resolver::table(
            table
                .iter()
                .map(|(name, ip)| (name.to_string(), vec![ip.parse().unwrap()])),
        );
        network
    }

    async fn check(network: &Network, uri: &str) -> Result<Vec<SocketAddr>, String> {
        network
            .check_request(&uri.parse().unwrap(), "p")
            .await
            .map(|(_, addrs)| addrs)
    }

    #[test]
    fn grants_parse_and_print() {
        for (text, printed) in [
            ("https://api.open-meteo.com", "https://api.open-meteo.com"),
            ("https://API.Open-Meteo.com/", "https://api.open-meteo.com"),
            ("*.wikipedia.org:443", "*.wikipedia.org:443"),
            ("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
            ("http://[::1]:*", "http://[::1]:*"),
        ] {
            let grant: NetworkGrant = text.parse().unwrap();
            assert_eq!(grant.to_string(), printed);
        }
        for (bad, expected) in [
            ("ftp://example.org", "scheme `ftp`"),
            ("https://example.org/path", "not a path"),
            ("example.org:99999", "not a number from 1 to 65535"),
            ("example.org:0", "not a number from 1 to 65535"),
            ("*.127.0.0.1", "goes with host names"),
            ("*.1", "not a canonical IP"),
            ("http://2130706433", "not a canonical IP"),
            ("http://0x7f.1", "not a canonical IP"),
            ("exa mple.org", "not a valid host name"),
            ("[::1", "without `]`"),
        ] {
            let error = bad.parse::<NetworkGrant>().unwrap_err();
            assert!(format!("{error:#}").contains(expected), "{bad}: {error:#}");
        }
    }

    #[tokio::test]
    async fn requests_must_match_scheme_host_and_port() {
        let network = with_resolver(
            grants(&[
                "https://api.example.org",
                "*.wiki.org:8443",
                "http://any.example.org:*",
            ]),
            &[
                ("api.example.org", "93.184.216.34"),
                ("en.wiki.org", "93.184.216.35"),
                ("any.example.org", "93.184.216.36"),
            ],
        );
        assert!(check(&network, "https://api.example.org/x").await.is_ok());
        assert!(check(&network, "https://API.example.org./x").await.is_ok());
        assert!(check(&network, "http://en.wiki.org:8443/").await.is_ok());
        assert!(check(&network, "https://en.wiki.org:8443/").await.is_ok());
        assert!(
            check(&network, "http://any.example.org:1234/")
                .await
                .is_ok()
        );
        for (uri, expected) in [
            (
                "http://api.example.org/",
                "api.example.org:80 denied: not granted to plugin \"p\"",
            ),
            (
                "https://api.example.org:444/",
                "api.example.org:444 denied: not granted",
            ),
            (
                "https://wiki.org:8443/",
                "wiki.org:8443 denied: not granted",
            ),
            (
                "https://evilwiki.org:8443/",
                "evilwiki.org:8443 denied: not granted",
            ),
            (
                "https://en.wiki.org/",
                "en.wiki.org:443 denied: not granted",
            ),
            (
                "https://evil.example:443/",
                "network access to evil.example:443 denied: not granted to plugin \"p\"",
            ),
        ] {
            let error = check(&network, uri).await.unwrap_err();
            assert!(error.contains(expected), "{uri}: {error}");
        }
    }

    #[tokio::test]
    async fn local_addresses_need_a_grant_naming_them() {
        let network = with_resolver(
            grants(&[
                "http://127.0.0.1:8080",
                "http://*.rebind.test:*",
                "http://[::1]:9090",
            ]),
            &[
                ("a.rebind.test", "127.0.0.1"),
                ("b.rebind.test", "::ffff:169.254.169.254"),
            ],
        );
        assert_eq!(
            check(&network, "http://127.0.0.1:8080/").await.unwrap(),
            ["127.0.0.1:8080".parse().unwrap()]
        );
        assert!(
            check(&network, "http://[::ffff:127.0.0.1]:8080/")
                .await
                .is_ok()
        );
        assert!(check(&network, "http://[::1]:9090/").await.is_ok());
        for (uri, expected) in [
            (
                "http://a.rebind.test:8080/",
                "it resolves to 127.0.0.1, a loopback address",
            ),
            (
                "http://b.rebind.test:80/",
                "it resolves to 169.254.169.254, a link-local address",
            ),
            ("http://127.0.0.1:8081/", "not granted"),
            ("http://2130706433:8080/", "not a canonical IP address"),
            ("http://0177.0.0.1:8080/", "not a canonical IP address"),
        ] {
            let error = check(&network, uri).await.unwrap_err();
            assert!(error.contains(expected), "{uri}: {error}");
        }
        let any = with_resolver(grants(&["http://*.test:*"]), &[("x.test", "10.1.2.3")]);
        let error = check(&any, "http://x.test/").await.unwrap_err();
        assert!(error.contains("10.1.2.3, a private address"), "{error}");
    }

    #[test]
    fn reserved_addresses_are_recognised() {
        for ip in [
            "0.0.0.0",
            "127.0.0.1",
            "10.0.0.1",
            "172.16.0.1",
            "192.168.1.1",
            "100.64.0.1",
            "169.254.169.254",
            "224.0.0.1",
            "255.255.255.255",
            "198.18.0.1",
            "::",
            "::1",
            "fc00::1",
            "fd12::1",
            "fe80::1",
            "ff02::1",
            "64:ff9b::7f00:1",
            "2002:7f00:1::",
            "2001:db8::1",
            "::7f00:1",
        ] {
            let ip: IpAddr = ip.parse().unwrap();
            assert!(reserved(ip.to_canonical()).is_some(), "{ip}");
        }
        assert!(reserved("::ffff:127.0.0.1".parse::<IpAddr>().unwrap().to_canonical()).is_some());
        for ip in [
            "93.184.216.34",
            "1.1.1.1",
            "2606:4700::1111",
            "64:ff9b::101:101",
            "172.32.0.1",
        ] {
            assert_eq!(reserved(ip.parse().unwrap()), None, "{ip}");
        }
    }

    #[test]
    fn sockets_need_ip_literal_grants() {
        let network = grants(&["http://127.0.0.1:8080", "https://example.org"]);
        let at = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert!(
            network
                .check_socket(at("127.0.0.1:8080"), SocketAddrUse::TcpConnect, "p")
                .is_ok()
        );
        assert!(
            network
                .check_socket(at("0.0.0.0:0"), SocketAddrUse::TcpBind, "p")
                .is_ok()
        );
        let error = network
            .check_socket(at("127.0.0.1:8081"), SocketAddrUse::TcpConnect, "p")
            .unwrap_err();
        assert!(
            error.contains("network access to 127.0.0.1:8081 denied"),
            "{error}"
        );
        assert!(
            network
                .check_socket(at("93.184.216.34:443"), SocketAddrUse::TcpConnect, "p")
                .is_err()
        );
        assert!(
            network
                .check_socket(at("0.0.0.0:8080"), SocketAddrUse::TcpListen, "p")
                .is_err()
        );
        assert!(
            network
                .check_socket(at("0.0.0.0:0"), SocketAddrUse::UdpBind, "p")
                .is_err()
        );
    }

    fn injecting(to: &str) -> Network {
        Network {
            inject: vec![Injection {
                to: Injection::target(to).unwrap(),
                header: HeaderName::from_static("authorization"),
                value: HeaderValue::from_static("Bearer t"),
            }],
            ..Network::default()
        }
    }

    /// The headers a request to `uri` leaves with.
    fn injected(network: &Network, uri: &str) -> http::HeaderMap {
        let uri: http::Uri = uri.parse().unwrap();
        let host = parse_host(uri.host().unwrap()).unwrap();
        let scheme = match uri.scheme_str() {
            Some("https") => Scheme::Https,
            _ => Scheme::Http,
        };
        let port = uri.port_u16().unwrap_or(scheme.default_port());
        let mut headers = http::HeaderMap::new();
        network.inject(&Target { scheme, host, port }, &mut headers);
        headers
    }

    #[test]
    fn injections_match_their_host_only() {
        let network = injecting("api.example.org");
        let mut headers = http::HeaderMap::new();
        headers.insert("authorization", HeaderValue::from_static("guest's own"));
        let target = Target {
            scheme: Scheme::Https,
            host: Host::Name("api.example.org".into()),
            port: 443,
        };
        network.inject(&target, &mut headers);
        assert_eq!(headers["authorization"], "Bearer t");
        assert!(injected(&network, "https://evil.example/").is_empty());
        assert!(!format!("{network:?}").contains("Bearer t"));
    }

    #[test]
    fn injections_go_over_https_unless_their_target_names_another_scheme() {
        let network = injecting("api.example.org");
        assert!(!injected(&network, "https://api.example.org/").is_empty());
        assert!(!injected(&network, "https://api.example.org:443/").is_empty());
        for uri in [
            "http://api.example.org/",
            "http://api.example.org:443/",
            "https://api.example.org:8443/",
        ] {
            assert!(injected(&network, uri).is_empty(), "{uri} got the header");
        }
        let loopback = injecting("http://127.0.0.1:8080");
        assert!(!injected(&loopback, "http://127.0.0.1:8080/").is_empty());
        assert!(injected(&loopback, "http://127.0.0.1:8081/").is_empty());
        assert!(injected(&loopback, "https://127.0.0.1:8080/").is_empty());
        let any_port = injecting("https://*.example.org:*");
        assert!(!injected(&any_port, "https://a.example.org:9/").is_empty());
        assert!(injected(&any_port, "http://a.example.org:9/").is_empty());
    }

    #[test]
    fn an_injection_must_be_able_to_travel_under_some_grant() {
        let travels = |to: &str, grant: &str| {
            injecting(to).inject[0].can_travel_under(&grant.parse().unwrap())
        };
        assert!(travels("api.example.org", "api.example.org"));
        assert!(travels("api.example.org", "https://*.example.org"));
        assert!(travels("*.example.org", "https://api.example.org"));
        assert!(travels("127.0.0.1", "127.0.0.1:*"));
        assert!(travels("http://127.0.0.1:8080", "http://127.0.0.1:8080"));
        assert!(!travels("api.example.org", "http://api.example.org"));
        assert!(!travels("api.example.org", "api.example.org:8443"));
        assert!(!travels("127.0.0.1", "http://127.0.0.1:8080"));
        assert!(!travels("http://127.0.0.1:8080", "https://127.0.0.1:8080"));
        assert!(!travels("api.example.org", "other.example.org"));
    }

    #[test]
    fn trace_and_connect_are_never_sent() {
        for method in [http::Method::TRACE, http::Method::CONNECT] {
            let error = check_method(&method, "p").unwrap_err();
            assert!(
                error.contains(&format!("the {method} method is never allowed")),
                "{error}"
            );
        }
        for method in [http::Method::GET, http::Method::POST, http::Method::DELETE] {
            assert!(check_method(&method, "p").is_ok(), "{method}");
        }
    }
}
