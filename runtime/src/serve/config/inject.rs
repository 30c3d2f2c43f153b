//! `inject`: headers moat adds to a plugin's requests to a host, so that the plugin never holds
//! the credential.

use std::collections::BTreeMap;

use anyhow::{Context, Result, bail};
use schemars::JsonSchema;
use serde::Deserialize;

use super::expand::Lookup;
use super::schema::{INJECTED_PATTERN, NETWORK_PATTERN};
use crate::sandbox::network::{Injected, Injection, NetworkGrant};

/// A header moat adds to the plugin's requests to one host.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct InjectEntry {
    /// Where the header goes, as a `network` entry names it, except that no scheme means https
    /// only: `api.example.com` (https, port 443), `*.example.com:8443`, and plain http only when
    /// written out, `http://127.0.0.1:8080`. Some `network` grant must allow it.
    #[schemars(regex(pattern = NETWORK_PATTERN))]
    pub(super) host: String,
    /// The header's name: `Authorization`, `X-Api-Key`.
    #[schemars(regex(pattern = r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$"))]
    header: String,
    /// The header's value; `${secret:NAME}` and `${env:NAME}` are replaced by their values:
    /// `"Bearer ${secret:API_TOKEN}"`. `${credential:NAME}` is the calling principal's own
    /// credential from `[credentials.NAME]`, found for each call: `"Bearer ${credential:tracker}"`.
    #[schemars(regex(pattern = INJECTED_PATTERN))]
    value: String,
}

pub(super) fn injection(
    entry: &InjectEntry,
    lookup: &Lookup,
    grants: &[NetworkGrant],
    sources: &BTreeMap<String, crate::upstream::Source>,
) -> Result<Injection> {
    let to = Injection::target(&entry.host)?;
    let header = http::HeaderName::try_from(&entry.header)
        .with_context(|| format!("`{}` is not a valid header name", entry.header))?;
    // The error must not quote the value: it may hold a secret.
    let invalid = "the value is not a valid header value (control characters?)";
    let value = match crate::serve::credentials::credential_reference(&entry.value)? {
        None => {
            let mut value = http::HeaderValue::try_from(lookup.expand(&entry.value)?)
                .ok()
                .context(invalid)?;
            value.set_sensitive(true);
            Injected::Fixed(value)
        }
        Some((before, source, after)) => {
            let Some(found) = sources.get(source) else {
                bail!(
                    "`${{credential:{source}}}` names no source: add [credentials.{source}] to \
                     moat.toml{}",
                    match sources.keys().map(String::as_str).collect::<Vec<_>>() {
                        names if names.is_empty() => String::new(),
                        names => format!(" (it has {})", names.join(", ")),
                    }
                );
            };
            if !found.hosts.iter().any(|host| host.covers(&to)) {
                bail!(
                    "[credentials.{source}] may be sent only to {}, and {to} is not one of them",
                    found
                        .hosts
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            }
            let (before, after) = (lookup.expand(before)?, lookup.expand(after)?);
            http::HeaderValue::try_from(format!("{before}credential{after}"))
                .ok()
                .context(invalid)?;
            Injected::Caller {
                source: source.to_string(),
                before,
                after,
            }
        }
    };
    let injection = Injection { to, header, value };
    if !grants.iter().any(|g| injection.can_travel_under(g)) {
        bail!(
            "no network grant allows requests to {}, so the header would never be sent (no \
             scheme means https only; write `http://HOST:PORT` to inject over plain http)",
            injection.to
        );
    }
    Ok(injection)
}
