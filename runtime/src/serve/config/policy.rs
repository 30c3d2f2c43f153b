//! `[policy]`: the Cedar policy files moat.toml names, and the token claims they may read.
//!
//! ```toml
//! [policy]
//! cedar = ["policies/team.cedar"]          # relative to moat.toml
//! claims = { department = "String", level = "Long" }
//! ```
//!
//! The enterprise policy may name files of its own (`cedar = […]`, `cedar_claims = {…}`): they
//! are read first and every `forbid` in them holds whatever moat.toml's permit.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use schemars::JsonSchema;
use serde::Deserialize;

use crate::policy::{Author, ClaimType, PolicyFile, Settings};
use crate::supply::policy::Policy;

/// Policies in Cedar over every call, list and outgoing request. Once any policy is given,
/// what no policy permits is denied.
#[derive(Clone, Debug, Default, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct PolicyEntry {
    /// Cedar policy files, relative to this file. `moat policy schema` writes the schema they
    /// are checked against.
    #[serde(default)]
    cedar: Vec<PathBuf>,
    /// Token claims the policies may read as `principal.claims.NAME`, with their Cedar type:
    /// `String`, `Long`, `Bool` or `Set<String>`.
    #[serde(default)]
    claims: BTreeMap<String, String>,
}

impl PolicyEntry {
    /// Paths resolved against `base`, each claim's type checked.
    pub(super) fn resolved(mut self, base: &Path) -> Result<Self> {
        for (name, kind) in &self.claims {
            ClaimType::parse(kind).map_err(|e| anyhow::anyhow!("[policy] claims.{name}: {e}"))?;
        }
        self.cedar = self.cedar.iter().map(|p| base.join(p)).collect();
        Ok(self)
    }

    /// The enterprise policy's files and claims, then these.
    pub fn settings(&self, enterprise: &Policy) -> Result<Settings> {
        let files = (enterprise.cedar.iter().map(|p| (p, Author::Enterprise)))
            .chain(self.cedar.iter().map(|p| (p, Author::Operator)))
            .map(|(path, author)| PolicyFile {
                path: path.clone(),
                author,
            })
            .collect();
        let mut claims = BTreeMap::new();
        for (name, kind, whose) in (enterprise
            .cedar_claims
            .iter()
            .map(|(n, k)| (n, k, "the enterprise policy")))
        .chain(self.claims.iter().map(|(n, k)| (n, k, "[policy] claims")))
        {
            let kind = ClaimType::parse(kind)
                .map_err(|e| anyhow::anyhow!("{whose}, claim `{name}`: {e}"))?;
            match claims.insert(name.clone(), kind) {
                Some(earlier) if earlier != kind => bail!(
                    "[policy] claims: claim `{name}` is {kind:?} here and {earlier:?} in the enterprise policy"
                ),
                _ => {}
            }
        }
        Ok(Settings { files, claims })
    }
}
