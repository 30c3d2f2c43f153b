//! Where a plugin comes from and whether it may load: its [`source`] (file, URL, OCI registry)
//! and digest, the [`lock`] that pins it, publishers' [`signing`], the enterprise [`policy`] that
//! admits it and caps its grants, the [`manifest`] it ships, and the [`cache`] of compiled code.
//! Nothing here runs a plugin: the output is bytes admitted with their grants.

pub mod cache;
pub mod embed;
pub mod lock;
pub mod manifest;
pub mod policy;
pub mod signing;
pub mod source;

use crate::sandbox::grants::Grants;
use crate::sandbox::limits::Limits;
use crate::wit::naming::ToolRules;
use source::Source;

/// Where a plugin comes from and what it may use.
#[derive(Clone, Debug, PartialEq)]
pub struct PluginSource {
    pub name: String,
    pub source: Source,
    pub limits: Limits,
    pub grants: Grants,
    /// The operator's renames and hidings of its tools (`[plugins.NAME.tools]`).
    pub tools: ToolRules,
}
