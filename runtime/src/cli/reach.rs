//! The URL a host is given for `moat serve --http ADDRESS`: one that reaches moat and whose
//! `Host` moat accepts. moat answers only loopback names and the names of `[http] hosts` (its
//! defence against DNS rebinding), so the address moat listens on is not always such a URL:
//! `0.0.0.0` is no address to connect to, and a LAN address is refused unless listed.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use anyhow::{Result, bail};

use moat::serve::service::Service;

/// The `Host` names moat accepts without `[http] hosts` (rmcp's defaults, which moat keeps).
const LOOPBACK_NAMES: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// A URL for the host, and what the user should know about the choice.
#[derive(Debug, PartialEq, Eq)]
pub struct Reach {
    pub url: String,
    pub note: Option<String>,
}

/// The URL of `/mcp` for a moat listening on `addr` with `service`'s `[http]` and `[auth]`;
/// an error when no URL both reaches that address and passes moat's `Host` check.
pub fn url(addr: SocketAddr, service: &Service) -> Result<Reach> {
    // What the operator said clients use.
    if let Some(resource) = &service.resource {
        return Ok(Reach {
            url: resource.clone(),
            note: None,
        });
    }
    let scheme = if service.tls.is_some() {
        "https"
    } else {
        "http"
    };
    let port = addr.port();
    let at = |authority: String| format!("{scheme}://{authority}/mcp");
    // The first name of [http] hosts that a request to this port may carry.
    let named = service
        .hosts
        .iter()
        .filter_map(|entry| authority(entry, port))
        .find(|authority| !is_ip(authority));
    let ip = addr.ip();
    let listed = |ip: IpAddr| {
        let text = ip.to_string();
        LOOPBACK_NAMES.contains(&text.as_str())
            || service
                .hosts
                .iter()
                .filter_map(|entry| authority(entry, port))
                .any(|authority| host_of(&authority) == text)
    };
    if ip.is_unspecified() {
        let loopback = SocketAddr::new(
            match ip {
                IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
                IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::LOCALHOST),
            },
            port,
        );
        return Ok(match named {
            Some(name) => Reach {
                url: at(name.clone()),
                note: Some(format!(
                    "{addr} is every address of this machine, none to connect to: the URL names \
                     {name} from [http] hosts; on this machine {} reaches moat too",
                    at(loopback.to_string())
                )),
            },
            None => Reach {
                url: at(loopback.to_string()),
                note: Some(format!(
                    "{addr} is every address of this machine, none to connect to: the URL is \
                     loopback, for a host on this machine. A host on another machine needs the \
                     name it uses in [http] hosts of moat.toml (moat refuses any other Host), \
                     given here with --config"
                )),
            },
        });
    }
    if listed(ip) {
        return Ok(Reach {
            url: at(addr.to_string()),
            note: None,
        });
    }
    match named {
        Some(name) => Ok(Reach {
            url: at(name.clone()),
            note: Some(format!(
                "moat refuses the Host {ip}, which [http] hosts does not list: the URL names \
                 {name} from [http] hosts, which should lead to {addr}"
            )),
        }),
        None => bail!(
            "no URL reaches moat at {addr} that moat accepts: it answers only loopback Host \
             names and those in [http] hosts, and loopback does not reach {ip}. Add \
             `hosts = [\"{}\"]` (or the name clients use) under [http] in moat.toml, and give it \
             here with --config",
            ip
        ),
    }
}

/// The authority a request to `port` carries for an entry of `[http] hosts` (`name` or
/// `name:port`); `None` when the entry names another port.
fn authority(entry: &str, port: u16) -> Option<String> {
    let entry = entry.trim();
    let (host, entry_port) = split_port(entry);
    match entry_port {
        Some(p) if p != port => None,
        Some(_) => Some(entry.to_string()),
        None if host.contains(':') => Some(format!("[{host}]:{port}")),
        None => Some(format!("{host}:{port}")),
    }
}

/// `name:port` or `[v6]:port` apart; a bare IPv6 address has no port.
fn split_port(entry: &str) -> (&str, Option<u16>) {
    if let Some(rest) = entry.strip_prefix('[') {
        let (host, after) = rest.split_once(']').unwrap_or((rest, ""));
        return (host, after.strip_prefix(':').and_then(|p| p.parse().ok()));
    }
    match entry.split_once(':') {
        Some((host, port)) if !port.contains(':') => (host, port.parse().ok()),
        _ => (entry, None),
    }
}

/// The host of an authority, without brackets or port.
fn host_of(authority: &str) -> String {
    split_port(authority).0.to_ascii_lowercase()
}

fn is_ip(authority: &str) -> bool {
    host_of(authority).parse::<IpAddr>().is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(hosts: &[&str]) -> Service {
        Service {
            hosts: hosts.iter().map(|h| h.to_string()).collect(),
            ..Default::default()
        }
    }

    fn reach(addr: &str, hosts: &[&str]) -> Result<Reach> {
        url(addr.parse().unwrap(), &service(hosts))
    }

    #[test]
    fn a_loopback_address_is_its_own_url() {
        let local = reach("127.0.0.1:8080", &[]).unwrap();
        assert_eq!(local.url, "http://127.0.0.1:8080/mcp");
        assert_eq!(local.note, None);
        assert_eq!(
            reach("[::1]:8080", &[]).unwrap().url,
            "http://[::1]:8080/mcp"
        );
    }

    #[test]
    fn every_address_becomes_loopback_or_a_listed_name_and_says_so() {
        let alone = reach("0.0.0.0:8080", &[]).unwrap();
        assert_eq!(alone.url, "http://127.0.0.1:8080/mcp");
        assert!(alone.note.unwrap().contains("[http] hosts"));
        assert_eq!(
            reach("[::]:8080", &[]).unwrap().url,
            "http://[::1]:8080/mcp"
        );
        // An IP address or another port in [http] hosts is no name for this URL.
        let named = reach(
            "0.0.0.0:8080",
            &["10.0.0.5", "other.example.com:9", "tools.example.com"],
        )
        .unwrap();
        assert_eq!(named.url, "http://tools.example.com:8080/mcp");
        assert!(named.note.unwrap().contains("http://127.0.0.1:8080/mcp"));
        let with_port = reach("0.0.0.0:8080", &["tools.example.com:8080"]).unwrap();
        assert_eq!(with_port.url, "http://tools.example.com:8080/mcp");
    }

    #[test]
    fn a_lan_address_needs_hosts_to_list_it_or_a_name() {
        let listed = reach("192.168.1.5:8080", &["192.168.1.5"]).unwrap();
        assert_eq!(listed.url, "http://192.168.1.5:8080/mcp");
        assert_eq!(listed.note, None);
        let named = reach("192.168.1.5:8080", &["box.lan"]).unwrap();
        assert_eq!(named.url, "http://box.lan:8080/mcp");
        let none = reach("192.168.1.5:8080", &[]).unwrap_err().to_string();
        assert!(none.contains("hosts = [\"192.168.1.5\"]"), "{none}");
        // 127.0.0.2 is loopback, but not a name moat accepts unlisted.
        assert!(reach("127.0.0.2:8080", &[]).is_err());
    }

    #[test]
    fn tls_and_a_resource_shape_the_url() {
        let tls = Service {
            tls: Some(("c.pem".into(), "k.pem".into())),
            ..Default::default()
        };
        let addr = "127.0.0.1:8443".parse().unwrap();
        assert_eq!(url(addr, &tls).unwrap().url, "https://127.0.0.1:8443/mcp");
        let resource = Service {
            resource: Some("https://tools.example.com/mcp".into()),
            ..Default::default()
        };
        let every = "0.0.0.0:8080".parse().unwrap();
        assert_eq!(
            url(every, &resource).unwrap().url,
            "https://tools.example.com/mcp"
        );
    }
}
