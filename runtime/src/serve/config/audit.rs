//! `[audit]`: where the audit log goes.

use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::Deserialize;

/// `[audit]`: where the audit log goes, and whether it records arguments in full.
#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AuditSettings {
    /// The log file, relative to moat.toml (`path = "audit.jsonl"`); created with mode 0600 and
    /// appended to. `-` writes the lines to standard output, for a log collector (HTTP only:
    /// on stdio, standard output carries MCP).
    pub path: PathBuf,
    /// `true` records each call's arguments in full; `false` (the default) only their sha256.
    #[serde(default)]
    pub arguments: bool,
}

/// `audit` with its path resolved against `base`, the file's folder; `-` (standard output)
/// stays as it is.
pub(super) fn resolved(audit: Option<AuditSettings>, base: &Path) -> Option<AuditSettings> {
    audit.map(|audit| AuditSettings {
        path: match audit.path.as_os_str() == crate::mcp::audit::STDOUT {
            true => audit.path.clone(),
            false => base.join(&audit.path),
        },
        ..audit
    })
}
