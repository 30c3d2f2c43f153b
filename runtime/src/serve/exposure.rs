//! How `moat serve --http` is set up from the config's service tables, the command line and the
//! enterprise policy: which credentials it takes, the resource it is for OAuth, TLS, hosts and
//! quotas.
//!
//! Authentication is on unless turned off with `--no-auth`, which only a loopback address takes
//! and a policy may forbid. With neither API keys nor OAuth configured, the local bearer token
//! is required: created on first use in a file only its owner may read.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{Result, bail};

use crate::access::authenticator::Authenticator;
use crate::access::credentials::{self, ApiKeys};
use crate::access::oauth::OAuth;
use crate::mcp::http::auth::{Authentication, ProtectedResource};
use crate::mcp::http::{Settings, tls};
use crate::serve::service::Service;
use crate::supply::policy::Policy;

/// What the command line says about HTTP, each taking the config's place.
#[derive(Clone, Debug, Default)]
pub struct Flags {
    pub no_auth: bool,
    pub token_file: Option<PathBuf>,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub metrics: Option<SocketAddr>,
}

/// The settings to serve `addr` with.
pub fn settings(
    service: Service,
    flags: Flags,
    addr: SocketAddr,
    policy: &Policy,
) -> Result<Settings> {
    let tls = match (flags.tls_cert, flags.tls_key) {
        (Some(cert), Some(key)) => Some(tls::Files { cert, key }),
        (None, None) => service
            .tls
            .clone()
            .map(|(cert, key)| tls::Files { cert, key }),
        _ => bail!("give both --tls-cert and --tls-key"),
    };
    let scheme = if tls.is_some() { "https" } else { "http" };
    let authentication = if flags.no_auth {
        if !addr.ip().is_loopback() {
            bail!(
                "--no-auth serves every tool to anyone who can reach {addr}; it is allowed on \
                 loopback addresses only"
            );
        }
        policy.check_no_auth()?;
        tracing::warn!(
            "AUTHENTICATION IS OFF (--no-auth): any process on this machine that can reach \
             {addr} may call every tool with its grants"
        );
        Authentication::Off
    } else if service.api_keys.is_empty() && service.oauth.is_none() {
        let path = credentials::token_file(flags.token_file, service.token_file.clone())?;
        let token = credentials::local_token(&path)?;
        tracing::info!(
            "requests need `Authorization: Bearer` with the token in {} (`moat config HOST \
             --http {addr}` prints a host's configuration with it)",
            path.display()
        );
        Authentication::Required {
            authenticator: Authenticator::new(Some(&token), ApiKeys::default(), None),
            resource: None,
        }
    } else {
        let resource_url = match &service.resource {
            Some(resource) => resource.clone(),
            None if addr.ip().is_loopback() => format!("{scheme}://{addr}/mcp"),
            None => bail!(
                "[auth] resource is needed on {addr}: the https URL of /mcp as clients reach it, \
                 which access tokens must name"
            ),
        };
        let (oauth, resource) = match service.oauth.clone() {
            Some(mut settings) => {
                settings.audience = resource_url.clone();
                let resource = ProtectedResource {
                    resource: resource_url,
                    authorization_servers: vec![settings.issuer.clone()],
                    scopes: settings.required_scopes.clone(),
                };
                (Some(OAuth::new(settings)?), Some(resource))
            }
            None => (None, None),
        };
        Authentication::Required {
            authenticator: Authenticator::new(None, ApiKeys::new(service.api_keys.clone()), oauth),
            resource,
        }
    };
    if !addr.ip().is_loopback() && tls.is_none() {
        tracing::warn!(
            "{addr} is reachable from other machines over plain HTTP: credentials cross the \
             network in the clear unless a TLS proxy stands in front (--tls-cert/--tls-key)"
        );
    }
    if !addr.ip().is_loopback() && service.hosts.is_empty() {
        tracing::warn!(
            "{addr} is reachable from other machines, but only loopback Host names are accepted: \
             list the names clients use in [http] hosts"
        );
    }
    let mut settings = Settings::new(authentication);
    settings.hosts = service.hosts;
    settings.origins = service.origins;
    settings.trusted_proxies = service.trusted_proxies;
    if let Some(max) = service.max_sessions {
        settings.max_sessions = max;
    }
    if let Some(idle) = service.session_idle {
        settings.session_idle = idle;
    }
    settings.tls = tls;
    settings.metrics_listener = flags.metrics.or(service.metrics);
    if let Some(finish) = service.drain_finish {
        settings.drain.finish = finish;
    }
    if let Some(drain) = service.drain {
        settings.drain.notice = drain;
    }
    Ok(settings)
}
