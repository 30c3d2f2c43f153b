//! What a network grant says: a scheme, a host pattern and a port, and how one is written.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;

use anyhow::{Context, Result, bail};

/// The URL schemes a grant may name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    Http,
    Https,
}

impl Scheme {
    pub(super) fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }

    pub(super) fn name(self) -> &'static str {
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
    pub(super) fn matches(&self, host: &Host) -> bool {
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
    pub(super) fn port_for(&self, scheme: Scheme) -> Option<u16> {
        match self.port {
            PortPattern::Default => Some(scheme.default_port()),
            PortPattern::Exact(port) => Some(port),
            PortPattern::Any => None,
        }
    }

    pub(super) fn matches(&self, target: &Target) -> bool {
        self.scheme.is_none_or(|s| s == target.scheme)
            && self.host.matches(&target.host)
            && self
                .port_for(target.scheme)
                .is_none_or(|p| p == target.port)
    }

    /// Whether a raw TCP connection to `addr` is granted: only IP-literal grants apply.
    pub(super) fn allows_socket(&self, addr: SocketAddr) -> bool {
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

/// Splits `host[:port]`, where an IPv6 host is in brackets.
pub(super) fn split_host_port(text: &str) -> Result<(&str, Option<&str>)> {
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
pub(super) fn parse_host(text: &str) -> Result<Host> {
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

/// Where a request or connection goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Target {
    pub(super) scheme: Scheme,
    pub(super) host: Host,
    pub(super) port: u16,
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
/// A request's host: a name to resolve, or an address.
pub(super) enum Host {
    Name(String),
    Ip(IpAddr),
}
