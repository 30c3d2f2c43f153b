//! Name resolution for network checks: the system's resolver, or a fixed table in tests and
//! configs that pin names.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;

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
pub struct Resolver(pub(super) Arc<dyn Resolve>);

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
