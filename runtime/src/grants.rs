//! What a plugin may reach besides its own memory: nothing unless the operator granted it.
//!
//! Grants arrive here already parsed and checked (see [`crate::config`]); this module only turns
//! them into the WASI context of one call. Path resolution inside a granted directory is
//! wasmtime-wasi's (`openat2` with `RESOLVE_BENEATH` on Linux): `..`, absolute paths and symlinks
//! cannot leave it.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use wasmtime_wasi::{FsPerms, WasiCtxBuilder};

use crate::network::Network;

/// A plugin's grants.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Grants {
    pub files: Vec<FileGrant>,
    /// Environment variables the guest sees, with their values resolved at load.
    pub env: Vec<(String, String)>,
    /// The hosts it may reach, and the headers moat adds for it (see [`crate::network`]).
    pub network: Arc<Network>,
}

/// A host directory, visible to the guest at `guest`.
#[derive(Clone, Debug, PartialEq)]
pub struct FileGrant {
    /// Canonical, so that the grant means the directory the operator named when moat started.
    pub host: PathBuf,
    pub guest: String,
    pub writable: bool,
}

impl Grants {
    /// Adds the granted directories and environment to a call's WASI context.
    pub fn apply(&self, wasi: &mut WasiCtxBuilder) -> Result<()> {
        for file in &self.files {
            let perms = if file.writable {
                FsPerms::ReadWrite
            } else {
                FsPerms::ReadOnly
            };
            wasi.preopened_dir(&file.host, &file.guest, perms)
                .map_err(anyhow::Error::from)
                .with_context(|| format!("opening granted directory {}", file.host.display()))?;
        }
        wasi.envs(&self.env);
        Ok(())
    }
}

/// Notes on the capabilities a component imports but was not granted, for `moat inspect` and the
/// load log. Such a plugin still loads, with the capability denied: Rust's standard library (and
/// most toolchains) import `wasi:filesystem` and `wasi:sockets` whether the code uses them or not,
/// so refusing would refuse nearly every plugin, and a denied use fails cleanly at run time.
pub fn ungranted(imports: &[String], grants: &Grants) -> Vec<String> {
    let imports_any = |prefix: &str| imports.iter().any(|i| i.starts_with(prefix));
    let mut notes = Vec::new();
    if imports_any("wasi:filesystem/") && grants.files.is_empty() {
        notes.push("imports wasi:filesystem, but no directory is granted: it sees no files".into());
    }
    for interface in ["wasi:sockets/", "wasi:http/"] {
        if imports_any(interface) && grants.network.is_empty() {
            notes.push(format!(
                "imports {}, but no network is granted: every connection is refused",
                interface.trim_end_matches('/')
            ));
        }
    }
    notes
}
