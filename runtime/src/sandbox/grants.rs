//! What a plugin may reach besides its own memory: nothing unless the operator granted it.
//!
//! Grants arrive here already parsed and checked (see [`crate::serve::config`]); this module only turns
//! them into the WASI context of one call. Path resolution inside a granted directory is
//! wasmtime-wasi's (`openat2` with `RESOLVE_BENEATH` on Linux): `..`, absolute paths and symlinks
//! cannot leave it.
//!
//! A granted directory is opened once, when the grant is read, and every instance is handed that
//! very directory through its descriptor, never the path again: the checks made at load (secrets
//! file, audit log, policy ceiling, protected files) are about the directory that is served. A
//! plugin that renames the directory away and puts a symlink at its path (in a writable grant of
//! its own or of another plugin) changes nothing for the instances after it.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use wasmtime_wasi::{FsPerms, WasiCtxBuilder};

use crate::sandbox::network::Network;

/// A plugin's grants.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Grants {
    pub files: Vec<FileGrant>,
    /// Environment variables the guest sees, with their values resolved at load.
    pub env: Vec<(String, String)>,
    /// Settings the guest reads through `wasi:config/store`, with their values resolved at load.
    pub config: Arc<BTreeMap<String, String>>,
    /// The hosts it may reach, and the headers moat adds for it (see [`crate::sandbox::network`]).
    pub network: Arc<Network>,
}

/// A host directory, visible to the guest at `guest`.
#[derive(Clone, Debug)]
pub struct FileGrant {
    /// Where the directory was when it was opened: the path every check is made against.
    pub host: PathBuf,
    /// The path as the operator named it, before symlinks were resolved.
    pub requested: PathBuf,
    pub guest: String,
    pub writable: bool,
    /// The directory itself, open from the moment the grant was read.
    dir: Arc<File>,
    /// Its device and inode, so that a grant whose path now names another directory differs.
    identity: (u64, u64),
}

/// Two grants are the same when they hand the guest the same directory in the same way.
impl PartialEq for FileGrant {
    fn eq(&self, other: &Self) -> bool {
        self.host == other.host
            && self.requested == other.requested
            && self.guest == other.guest
            && self.writable == other.writable
            && self.identity == other.identity
    }
}

impl FileGrant {
    /// Opens the directory at `path` for a grant at `guest`.
    pub fn open(path: &Path, guest: &str, writable: bool) -> Result<Self> {
        let dir = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| match e.raw_os_error() {
                Some(libc::ENOTDIR) => anyhow::anyhow!("is not a directory"),
                _ => anyhow::Error::from(e),
            })
            .with_context(|| format!("granted directory {}", path.display()))?;
        let metadata = dir.metadata()?;
        // The path of the directory this descriptor holds, not of whatever the name means by now.
        let host = std::fs::read_link(fd_path(&dir))
            .or_else(|_| path.canonicalize())
            .with_context(|| format!("granted directory {}", path.display()))?;
        if !host.is_absolute() {
            bail!("granted directory {}: no absolute path", path.display());
        }
        Ok(Self {
            host,
            requested: std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf()),
            guest: guest.to_string(),
            writable,
            dir: Arc::new(dir),
            identity: (metadata.dev(), metadata.ino()),
        })
    }

    /// Hands the guest this directory at `guest`, through the descriptor opened at load: the
    /// directory that was checked, wherever it is now.
    fn preopen(&self, wasi: &mut WasiCtxBuilder, guest: &str) -> Result<()> {
        let perms = if self.writable {
            FsPerms::ReadWrite
        } else {
            FsPerms::ReadOnly
        };
        wasi.preopened_dir(fd_path(&self.dir), guest, perms)
            .map_err(anyhow::Error::from)
            .with_context(|| format!("opening granted directory {}", self.host.display()))?;
        Ok(())
    }

    /// The same grant, writable or not.
    pub fn with_writable(&self, writable: bool) -> Self {
        Self {
            writable,
            ..self.clone()
        }
    }
}

/// A path that opens the very file `file` holds open: the kernel's name for the descriptor.
fn fd_path(file: &File) -> PathBuf {
    let fd = file.as_raw_fd();
    if cfg!(target_os = "linux") {
        PathBuf::from(format!("/proc/self/fd/{fd}"))
    } else {
        PathBuf::from(format!("/dev/fd/{fd}"))
    }
}

impl Grants {
    /// Adds the granted directories and environment to a call's WASI context.
    ///
    /// The first directory is also the guest's working directory, so that a tool given a
    /// relative path finds it there: WASI's `initial-cwd` says so, and since wasi-libc (Rust's
    /// standard library, CPython, C) ignores it and resolves relative paths against a preopen
    /// named `.`, the directory is preopened under that name too, with the same permissions.
    pub fn apply(&self, wasi: &mut WasiCtxBuilder) -> Result<()> {
        for file in &self.files {
            file.preopen(wasi, &file.guest)?;
        }
        if let Some(first) = self.files.first() {
            first.preopen(wasi, ".")?;
            wasi.initial_cwd(&first.guest);
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
    if imports_any("wasi:config/") && grants.config.is_empty() {
        notes.push(
            "imports wasi:config/store, but no config values are set (`config` in moat.toml): \
             every key it reads is unset"
                .into(),
        );
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_plugin_imports_and_is_not_granted_is_noted() {
        let imports = [
            "wasi:config/store@0.2.0-rc.1",
            "wasi:filesystem/types@0.2.6",
        ]
        .map(String::from)
        .to_vec();
        let none = Grants::default();
        let notes = ungranted(&imports, &none);
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(notes[0].starts_with("imports wasi:filesystem"), "{notes:?}");
        assert!(notes[1].starts_with("imports wasi:config/store, but no config values"));
        let configured = Grants {
            config: Arc::new(BTreeMap::from([("units".into(), "metric".into())])),
            ..Grants::default()
        };
        assert_eq!(ungranted(&imports, &configured).len(), 1);
    }
}
