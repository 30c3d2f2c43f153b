//! Callers' consented tokens in a file (`credential_store`), so that a restart does not ask
//! everyone again and `moat credentials` can list and revoke them.
//!
//! The file is owner-only and sealed whole with ChaCha20-Poly1305 under a key derived from a
//! secret of the secrets file: a copy of it without the secret is worth nothing, and a changed
//! byte makes it unreadable rather than wrong. moat reads it again when another process (the
//! `moat credentials revoke` of an operator) changed it.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

pub use crate::shared::seal::Seal;

/// What the sealed bytes are bound to: another file's contents do not open as this one's.
const AAD: &[u8] = b"moat credential store v1";

/// `credential_store`, checked: the file (none under `[cluster]`, where Redis keeps the
/// tokens) and the secret the key is derived from.
#[derive(Clone, PartialEq)]
pub struct Settings {
    pub path: Option<PathBuf>,
    pub key: String,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// One principal's tokens from one source.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub source: String,
    pub principal: String,
    pub access: String,
    pub refresh: Option<String>,
    /// When the access token is to be refreshed, in seconds since the Unix epoch.
    pub refresh_at: Option<u64>,
}

/// The sealed file.
pub struct Store {
    path: PathBuf,
    seal: Seal,
    /// The file's modification time and length when last read or written here.
    seen: Mutex<Option<(SystemTime, u64)>>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("path", &self.path).finish()
    }
}

impl Store {
    /// The store at `path`, sealed under a key derived from `secret`.
    pub fn new(path: &Path, secret: &str) -> Result<Self> {
        Ok(Self {
            path: path.to_path_buf(),
            seal: Seal::new(secret)?,
            seen: Mutex::default(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn stamp(&self) -> Option<(SystemTime, u64)> {
        let meta = fs::metadata(&self.path).ok()?;
        Some((meta.modified().ok()?, meta.len()))
    }

    /// Whether the file changed since this store last read or wrote it.
    pub fn changed(&self) -> bool {
        *self.seen.lock().unwrap_or_else(|e| e.into_inner()) != self.stamp()
    }

    /// Every entry; none when the file does not exist yet.
    pub fn load(&self) -> Result<Vec<Entry>> {
        let sealed = match fs::read(&self.path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                *self.seen.lock().unwrap_or_else(|e| e.into_inner()) = None;
                return Ok(Vec::new());
            }
            Err(e) => return Err(e).with_context(|| format!("reading {}", self.path.display())),
        };
        let mode = fs::metadata(&self.path)?.permissions().mode();
        if mode & 0o077 != 0 {
            bail!(
                "the credential store {} is open to its group or others (mode {:o}); make it \
                 private with `chmod 600`",
                self.path.display(),
                mode & 0o777
            );
        }
        let entries = self.open(sealed).with_context(|| {
            format!(
                "the credential store {} does not open with its key (another key, or a changed \
                 file)",
                self.path.display()
            )
        })?;
        *self.seen.lock().unwrap_or_else(|e| e.into_inner()) = self.stamp();
        Ok(entries)
    }

    fn open(&self, sealed: Vec<u8>) -> Result<Vec<Entry>> {
        Ok(serde_json::from_slice(&self.seal.open(sealed, AAD)?)?)
    }

    /// Changes the entries with `change`, read again and written back under the file's lock
    /// (`flock` on `PATH.lock`, which every moat and `moat credentials` take), so that two
    /// writers never lose each other's change. Gives back what `change` said and the entries.
    pub fn update<T>(&self, change: impl FnOnce(&mut Vec<Entry>) -> T) -> Result<(T, Vec<Entry>)> {
        let _lock = self.lock()?;
        let mut entries = self.load()?;
        let before = entries.clone();
        let outcome = change(&mut entries);
        if entries != before {
            self.save(&entries)?;
        }
        Ok((outcome, entries))
    }

    /// The file's lock, held until the returned file is dropped.
    fn lock(&self) -> Result<fs::File> {
        let path = self.path.with_extension("lock");
        let file = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        // SAFETY: flock on a descriptor this function owns; it is released when the file closes.
        if unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&file), libc::LOCK_EX) } != 0 {
            return Err(std::io::Error::last_os_error())
                .with_context(|| format!("locking {}", path.display()));
        }
        Ok(file)
    }

    /// Replaces the file with `entries`: written beside it, owner-only, then renamed over it.
    fn save(&self, entries: &[Entry]) -> Result<()> {
        let sealed = self.seal.seal(&serde_json::to_vec(entries)?, AAD)?;
        let temporary = self.path.with_extension("tmp");
        let _ = fs::remove_file(&temporary);
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temporary)
            .with_context(|| format!("writing {}", temporary.display()))?;
        file.write_all(&sealed)?;
        file.sync_all()?;
        fs::rename(&temporary, &self.path)
            .with_context(|| format!("replacing {}", self.path.display()))?;
        *self.seen.lock().unwrap_or_else(|e| e.into_inner()) = self.stamp();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "0123456789abcdef0123456789abcdef";

    fn entry(principal: &str) -> Entry {
        Entry {
            source: "tracker".into(),
            principal: principal.into(),
            access: format!("access-of-{principal}"),
            refresh: Some("r".into()),
            refresh_at: Some(1_900_000_000),
        }
    }

    #[test]
    fn a_sealed_value_opens_only_for_the_purpose_it_was_sealed_for() {
        let seal = Seal::new(SECRET).unwrap();
        let sealed = seal.seal(b"alice's token", b"key of alice").unwrap();
        assert_eq!(
            seal.open(sealed.clone(), b"key of alice").unwrap(),
            b"alice's token"
        );
        // Moved under bob's key, or opened with another key: refused, not misread.
        assert!(seal.open(sealed.clone(), b"key of bob").is_err());
        let other = Seal::new(&SECRET.replace('0', "x")).unwrap();
        assert!(other.open(sealed, b"key of alice").is_err());
        assert!(seal.open(vec![0; 11], b"key of alice").is_err());
    }

    #[test]
    fn entries_come_back_only_with_the_key_and_never_in_clear() {
        let dir = std::env::temp_dir().join(format!("moat-store-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("credentials.sealed");
        let store = Store::new(&path, SECRET).unwrap();
        assert_eq!(store.load().unwrap(), []);
        store
            .update(|entries| entries.extend([entry("alice"), entry("bob")]))
            .unwrap();
        assert!(!store.changed());
        let bytes = fs::read(&path).unwrap();
        assert!(!String::from_utf8_lossy(&bytes).contains("access-of-alice"));
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        // Another process (the same key) reads it; this one sees the change.
        let other = Store::new(&path, SECRET).unwrap();
        assert_eq!(other.load().unwrap(), [entry("alice"), entry("bob")]);
        other
            .update(|entries| entries.retain(|e| e.principal == "bob"))
            .unwrap();
        assert!(store.changed());
        assert_eq!(store.load().unwrap(), [entry("bob")]);
        // Another key, or a changed byte: refused, not misread.
        let wrong = Store::new(&path, &SECRET.replace('0', "x")).unwrap();
        assert!(format!("{:#}", wrong.load().unwrap_err()).contains("does not open with its key"));
        let mut bytes = fs::read(&path).unwrap();
        *bytes.last_mut().unwrap() ^= 1;
        fs::write(&path, bytes).unwrap();
        assert!(store.load().is_err());
        assert!(Store::new(&path, "short").is_err());
        fs::remove_dir_all(&dir).unwrap();
    }
}
