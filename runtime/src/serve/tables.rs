//! The service tables of `moat.toml` (`[auth]`, `[[access]]`, `[quotas]`, `[http]`, `[audit]`,
//! `[telemetry]`) as moat serves them: applied when it starts and again by every reload, so an
//! API key removed from the file stops working at once and a changed quota applies to the next
//! request.
//!
//! What only a restart can change (the listener's hosts, origins, TLS files and metrics address,
//! the idle time of sessions and the drain, the audit log, the trace collector, the stdio
//! principal, the shared store of `[cluster]`) is compared with what moat started with: a reload
//! that changes one of them is refused whole, naming each, and nothing else of it is applied
//! either.

use std::net::SocketAddr;

use anyhow::{Result, bail};

use crate::mcp::catalogue::{Catalogue, CredentialSources};
use crate::mcp::http::{Live, Settings};
use crate::mcp::request_state::Sealer;
use crate::serve::config::AuditSettings;
use crate::serve::exposure::{self, Flags};
use crate::serve::service::Service;
use crate::supply::policy::Policy;

/// What the service tables are applied to.
pub struct Tables {
    /// What the command line set in their place, which no edit of the file changes.
    overridden: Overridden,
    /// The HTTP listener, when serving HTTP.
    http: Option<Http>,
    policy: Policy,
    /// What only a restart changes, as moat started.
    fixed: Fixed,
    /// The request-state key in use, when the configuration gave one.
    state_key: Option<Vec<u8>>,
}

/// The settings the command line gave, which the file's then do not count for.
#[derive(Clone, Copy, Debug, Default)]
pub struct Overridden {
    /// `--audit`
    pub audit: bool,
    /// `--otlp-endpoint`
    pub otlp_endpoint: bool,
}

struct Http {
    addr: SocketAddr,
    flags: Flags,
    live: Live,
}

/// The settings a reload cannot change, as the file gives them.
#[derive(Clone, Debug, Default, PartialEq)]
struct Fixed {
    audit: Option<AuditSettings>,
    otlp_endpoint: Option<String>,
    stdio_principal: Option<String>,
    cluster: Option<crate::cluster::Settings>,
}

/// The tables read, checked and built, ready to swap in: nothing that can fail is left for
/// [`Tables::apply`], so a reload applies whole or not at all.
pub struct Prepared {
    service: Service,
    http: Option<Settings>,
    /// A new sealer of request states, when the key changed.
    sealer: Option<Sealer>,
    credentials: CredentialSources,
}

impl Tables {
    /// The tables as moat starts with `service` and `audit` (the config's `[audit]`); `http` is
    /// the address and flags moat serves HTTP with and the settings its router reads (stdio:
    /// `None`).
    pub fn new(
        service: &Service,
        audit: Option<AuditSettings>,
        overridden: Overridden,
        http: Option<(SocketAddr, Flags, Live)>,
        policy: Policy,
    ) -> Self {
        let mut tables = Self {
            overridden,
            http: http.map(|(addr, flags, live)| Http { addr, flags, live }),
            policy,
            fixed: Fixed::default(),
            state_key: None,
        };
        tables.fixed = tables.fixed(service, audit);
        tables
    }

    /// The enterprise policy every load is under.
    pub fn enterprise(&self) -> &Policy {
        &self.policy
    }

    /// The HTTP settings `service` gives at `addr`, under `policy`.
    pub fn http_settings(
        service: &Service,
        flags: Flags,
        addr: SocketAddr,
        policy: &Policy,
    ) -> Result<Settings> {
        exposure::settings(service.clone(), flags, addr, policy)
    }

    fn fixed(&self, service: &Service, audit: Option<AuditSettings>) -> Fixed {
        Fixed {
            audit: audit.filter(|_| !self.overridden.audit),
            otlp_endpoint: service
                .otlp_endpoint
                .clone()
                .filter(|_| !self.overridden.otlp_endpoint),
            stdio_principal: service.stdio_principal.clone(),
            cluster: service.cluster.clone(),
        }
    }

    /// Refuses `[credentials]` sources the policy does not allow.
    fn check_credentials(&self, service: &Service) -> Result<()> {
        for (name, source) in &service.credentials {
            let mut otherwise = Vec::new();
            if !source.principals.is_empty() {
                otherwise.push("principals");
            }
            if source.consent.is_some() {
                otherwise.push("consent");
            }
            self.policy.check_credential_source(name, &otherwise)?;
        }
        Ok(())
    }

    /// What `service` gives at start, built (its HTTP settings went to the router already).
    pub fn at_start(&self, service: Service, catalogue: &Catalogue) -> Result<Prepared> {
        self.built(service, None, catalogue)
    }

    /// Builds what `service` gives beside the HTTP `settings`: what can fail to build fails here.
    fn built(
        &self,
        service: Service,
        http: Option<Settings>,
        catalogue: &Catalogue,
    ) -> Result<Prepared> {
        self.check_credentials(&service)?;
        let sealer = match &service.request_state_key {
            key if *key == self.state_key => None,
            // Without a key of its own moat makes one: states sealed with the old key fail.
            Some(key) => Some(Sealer::with_key(key).map_err(anyhow::Error::msg)?),
            None => Some(Sealer::default()),
        };
        let credentials = catalogue.prepare_credential_sources(
            service.credentials.clone(),
            service.credential_store.clone(),
        )?;
        Ok(Prepared {
            service,
            http,
            sealer,
            credentials,
        })
    }

    /// Checks what `service` and `audit`, read anew from the file, would change, without
    /// changing anything: an error names each setting that waits for a restart.
    pub fn prepare(
        &self,
        service: Service,
        audit: Option<AuditSettings>,
        catalogue: &Catalogue,
    ) -> Result<Prepared> {
        self.check_credentials(&service)?;
        let fixed = self.fixed(&service, audit);
        let mut changed = Vec::new();
        if fixed.audit != self.fixed.audit {
            changed.push("[audit]".to_string());
        }
        if fixed.otlp_endpoint != self.fixed.otlp_endpoint {
            changed.push("[telemetry] otlp_endpoint".to_string());
        }
        if fixed.stdio_principal != self.fixed.stdio_principal {
            changed.push("[auth] stdio_principal".to_string());
        }
        if fixed.cluster != self.fixed.cluster {
            changed.push("[cluster]".to_string());
        }
        let http = match &self.http {
            Some(http) => {
                let settings =
                    Self::http_settings(&service, http.flags.clone(), http.addr, &self.policy)?;
                changed.extend(http.live.restart_needed(&settings));
                Some(settings)
            }
            None => None,
        };
        if !changed.is_empty() {
            bail!(
                "{} changed, which only a restart of moat applies; nothing was reloaded (restart \
                 moat, or put the old value back)",
                changed.join(", ")
            );
        }
        self.built(service, http, catalogue)
    }

    /// Serves the next requests with `prepared`: who may call, what each may use and how
    /// much, the credentials their calls carry upstream, and the key of request states. It
    /// only swaps what [`Tables::prepare`] built, so it cannot fail halfway.
    pub fn apply(&mut self, prepared: Prepared, catalogue: &Catalogue) {
        let Prepared {
            service,
            http,
            sealer,
            credentials,
        } = prepared;
        if let Some(sealer) = sealer {
            catalogue.set_sealer(sealer);
            self.state_key = service.request_state_key.clone();
        }
        catalogue.set_tool_sets(service.tool_sets(&self.policy.deny_tools));
        catalogue.set_credential_sources(credentials);
        catalogue
            .quotas()
            .configure(service.default_quota, service.quotas);
        if let (Some(http), Some(settings)) = (&self.http, http) {
            http.live.apply(settings);
        }
    }
}
