//! `[console]`: the operators' web page, off unless this table is given.
//!
//! ```toml
//! [console]
//! admins = ["alice", "group:ops", "key:deploy"]   # default ["local"]
//! address = "127.0.0.1:9091"                      # default: beside /mcp; [http] metrics: there
//! session_minutes = 30
//! ```

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Result, bail};
use schemars::JsonSchema;
use serde::Deserialize;

/// The operators' console, served by `moat serve --http` at `/console/`. Operators sign in
/// with `[auth.oauth] sign_in` (register `…/console/signed-in` as a redirect URI of that
/// client), or open the one-time link `moat console` prints.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConsoleEntry {
    /// Who may use it: principal names as `[[access]]` names them (`alice`, `key:deploy`,
    /// `local` for the local token), or `group:NAME` for a token's group.
    #[schemars(extend("default" = ["local"]))]
    admins: Option<Vec<String>>,
    /// Serve it on this address (`HOST:PORT`) instead of beside `/mcp`; the metrics listener's
    /// (`[http] metrics`) puts it there. Not on loopback, it needs TLS (`[http] tls_cert`, beside
    /// `/mcp`) or a trusted proxy that gives it (`[http] trusted_proxies`).
    address: Option<SocketAddr>,
    /// How long a sign-in lasts, in minutes.
    #[schemars(extend("default" = 30), range(min = 1, max = 720))]
    session_minutes: Option<u64>,
}

/// Who may use the console.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admin {
    Principal(String),
    Group(String),
}

/// The `[console]` table, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsoleSettings {
    pub admins: Vec<Admin>,
    pub address: Option<SocketAddr>,
    pub session: Duration,
}

impl ConsoleEntry {
    pub(super) fn settings(self) -> Result<ConsoleSettings> {
        let names = self.admins.unwrap_or_else(|| vec!["local".into()]);
        if names.is_empty() {
            bail!("[console] admins is empty: name at least one operator (such as \"local\")");
        }
        let mut admins = Vec::new();
        for name in names {
            admins.push(match name.strip_prefix("group:") {
                Some("") => bail!("[console] admins: \"group:\" names no group"),
                Some(group) => Admin::Group(group.to_string()),
                None if name.trim().is_empty() => bail!("[console] admins: an empty name"),
                None => Admin::Principal(name),
            });
        }
        let minutes = self.session_minutes.unwrap_or(30);
        if !(1..=720).contains(&minutes) {
            bail!("[console] session_minutes must be from 1 to 720 (it is {minutes})");
        }
        Ok(ConsoleSettings {
            admins,
            address: self.address,
            session: Duration::from_secs(minutes * 60),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<ConsoleSettings> {
        toml::from_str::<ConsoleEntry>(text)?.settings()
    }

    #[test]
    fn admins_are_principals_or_groups_and_local_by_default() {
        let console = read("admins = [\"alice\", \"group:ops\"]").unwrap();
        let expected = [Admin::Principal("alice".into()), Admin::Group("ops".into())];
        assert_eq!(console.admins, expected);
        assert_eq!(read("").unwrap().admins, [Admin::Principal("local".into())]);
        let error = |text| format!("{:#}", read(text).unwrap_err());
        assert!(error("admins = []").contains("admins is empty"));
        assert!(error("admins = [\"group:\"]").contains("names no group"));
        assert!(error("session_minutes = 0").contains("from 1 to 720"));
        assert!(error("admin = [\"x\"]").contains("unknown field `admin`"));
    }
}
