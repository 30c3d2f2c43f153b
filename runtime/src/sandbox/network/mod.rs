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

use std::fmt;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use anyhow::Result;
use wasmtime_wasi::sockets::SocketAddrUse;

use crate::sandbox::guest_log::{GuestLog, Severity};

mod address;
mod grant;
pub mod redact;
mod requests;
mod resolve;

pub use grant::{HostPattern, NetworkGrant, PortPattern, Scheme};
pub use redact::Secret;
use requests::Asking;
pub use requests::{
    CallCredentials, CallReach, HttpHooks, Injected, Injection, Missing, PendingInput, Reached,
};
pub use resolve::{Resolve, Resolver};

use address::reserved;
use grant::{Host, Target, parse_host, split_host_port};

/// Everything a plugin may reach on the network, and the headers moat adds on the way.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Network {
    pub grants: Vec<NetworkGrant>,
    pub inject: Vec<Injection>,
    pub resolver: Resolver,
}

/// Why a guest's request is not sent.
#[derive(Debug)]
pub(super) enum Unsent {
    /// The grants or moat's rules refuse it: a denial, logged and audited as one.
    Denied(String),
    /// It is granted, but its host name resolves to no address: the guest gets a DNS error.
    NoAddress(String),
}

#[cfg(test)]
impl Unsent {
    fn message(&self) -> &str {
        match self {
            Self::Denied(message) | Self::NoAddress(message) => message,
        }
    }
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

    /// Checks a request for `uri`: the addresses it may connect to, or why it is not sent.
    async fn check_request(
        &self,
        uri: &http::Uri,
        plugin: &str,
    ) -> Result<(Target, Vec<SocketAddr>), Unsent> {
        let scheme = match uri.scheme_str() {
            Some("http") => Scheme::Http,
            Some("https") => Scheme::Https,
            other => {
                return Err(Unsent::Denied(format!(
                    "network access denied: scheme {other:?} is not http or https"
                )));
            }
        };
        let authority = uri.authority().map(|a| a.as_str()).unwrap_or_default();
        let denied = |what: &dyn fmt::Display, why: String| {
            Unsent::Denied(format!("network access to {what} denied: {why}"))
        };
        // Granted, but nowhere to go: no denial, as when the host does not answer.
        let unresolved = |what: &dyn fmt::Display, why: String| {
            Unsent::NoAddress(format!("network access to {what} failed: {why}"))
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
                .map_err(|e| unresolved(&target, format!("resolving the name failed: {e}")))?,
        };
        if addrs.is_empty() {
            return Err(unresolved(
                &target,
                "the name resolves to no address".into(),
            ));
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

    /// Adds the headers meant for `target`, taking the place of the guest's own: fixed values
    /// as they are, a caller's credential from `credentials`. Gives back what was added, or why
    /// a credential is missing (then nothing is sent).
    async fn inject(
        &self,
        target: &Target,
        headers: &mut http::HeaderMap,
        asking: Asking<'_>,
    ) -> Result<Added, Denial> {
        let mut added = Added::default();
        for injection in self.inject.iter().filter(|i| i.to.matches(target)) {
            let value = match &injection.value {
                Injected::Fixed(value) => {
                    added.secrets.extend(Secret::of_header(value.as_bytes()));
                    value.clone()
                }
                Injected::Caller {
                    source,
                    before,
                    after,
                } => {
                    let token = asking.credential(source).await?;
                    let mut value = http::HeaderValue::try_from(format!("{before}{token}{after}"))
                        .map_err(|_| {
                            format!("the credential \"{source}\" is not a valid header value")
                        })?;
                    value.set_sensitive(true);
                    added.secrets.extend(Secret::new(token.into_bytes()));
                    added.sources.push(source.clone());
                    value
                }
            };
            headers.insert(injection.header.clone(), value);
        }
        Ok(added)
    }
}

/// What [`Network::inject`] added to a request.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Added {
    /// The credentials, to be taken out of the answer.
    secrets: Vec<Secret>,
    /// The sources of the callers' credentials among them.
    sources: Vec<String>,
}

/// Why a request was refused: what the caller is told, and what logs, traces and the audit
/// record. They differ only where the caller's text holds what only the caller may see (the
/// link that connects their account, which anyone reading a log could otherwise finish).
#[derive(Clone, Debug, PartialEq)]
pub struct Denial {
    pub shown: String,
    pub recorded: String,
}

impl Denial {
    /// `text` wrapped the same way in both.
    pub fn map(self, text: impl Fn(&str) -> String) -> Self {
        Self {
            shown: text(&self.shown),
            recorded: text(&self.recorded),
        }
    }
}

impl From<String> for Denial {
    fn from(text: String) -> Self {
        Self {
            shown: text.clone(),
            recorded: text,
        }
    }
}

/// The denials of one call, shared by the hooks that record them and the call that reports them.
#[derive(Clone, Debug, Default)]
pub struct Denials {
    list: Arc<Mutex<Vec<Denial>>>,
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
    pub fn record(&self, denial: impl Into<Denial>) {
        let denial = denial.into();
        let mut denials = self.list.lock().unwrap_or_else(|e| e.into_inner());
        if denials.contains(&denial) {
            return;
        }
        if let Some(log) = &self.log {
            log.write(Severity::Warning, &denial.recorded);
        }
        if denials.len() < 32 {
            denials.push(denial);
        }
    }

    pub fn take(&self) -> Vec<Denial> {
        std::mem::take(&mut *self.list.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

#[cfg(test)]
mod tests;
