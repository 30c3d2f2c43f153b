//! Downloaded components on disk, by digest, and what moat knows of each URL it downloaded.
//!
//! `blobs/sha256-<hex>.wasm` holds a component, `blobs/sha256-<hex>.minisig` the publisher's
//! signature that came with it; `urls/<sha256 of the URL>.json` the URL's
//! validators and the digest it last gave, `oci/<sha256 of the reference>.json` the manifest,
//! component digest and signature a registry reference last gave. A blob is hashed again whenever it is read, so a
//! changed or truncated file is treated as missing, never handed on.

use std::fs;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use super::Digest;

/// The download store: a folder in moat's cache folder.
#[derive(Clone, Debug)]
pub struct Store {
    dir: PathBuf,
}

/// What the last download of a URL gave.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct UrlRecord {
    pub url: String,
    pub digest: Digest,
    pub etag: Option<String>,
    pub last_modified: Option<String>,
}

/// What the last pull of a registry reference gave.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct OciRecord {
    /// The reference as the operator wrote it (after `oci://`).
    pub reference: String,
    pub manifest: String,
    /// The component layer's digest.
    pub digest: Digest,
    /// The publisher's signature the artifact carried.
    pub signature: Option<String>,
}

impl Store {
    /// `sources/` in moat's cache folder (see [`crate::supply::cache::Cache::default_dir`]).
    pub fn default_dir() -> Option<PathBuf> {
        crate::supply::cache::Cache::default_dir().map(|dir| dir.join("sources"))
    }

    /// Opens (creating it if need be) a store only the current user can enter.
    pub fn open(dir: &Path) -> Result<Self> {
        for sub in ["blobs", "urls", "oci"] {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir.join(sub))
                .with_context(|| format!("creating {}", dir.join(sub).display()))?;
        }
        Ok(Self {
            dir: dir.to_path_buf(),
        })
    }

    /// The component with this digest, if the store has it intact.
    pub fn blob(&self, digest: &Digest) -> Option<Vec<u8>> {
        let path = self.blob_path(digest);
        let bytes = fs::read(&path).ok()?;
        if Digest::of(&bytes) != *digest {
            tracing::warn!("ignoring {}: its content changed", path.display());
            return None;
        }
        Some(bytes)
    }

    /// Keeps a component; `digest` must be its sha256.
    pub fn put_blob(&self, digest: &Digest, bytes: &[u8]) -> Result<()> {
        debug_assert_eq!(Digest::of(bytes), *digest);
        write_atomically(&self.blob_path(digest), bytes)
    }

    /// The publisher's signature kept with the component with this digest, if any. It needs
    /// no check here: the policy verifies it against the component's bytes.
    pub fn signature(&self, digest: &Digest) -> Option<String> {
        fs::read_to_string(self.blob_path(digest).with_extension("minisig")).ok()
    }

    /// Keeps the publisher's signature of the component with this digest.
    pub fn put_signature(&self, digest: &Digest, text: &str) -> Result<()> {
        write_atomically(
            &self.blob_path(digest).with_extension("minisig"),
            text.as_bytes(),
        )
    }

    /// What the last download of `url` gave, if anything.
    pub fn url_record(&self, url: &str) -> Option<UrlRecord> {
        let text = fs::read(self.url_path(url)).ok()?;
        let record: UrlRecord = serde_json::from_slice(&text).ok()?;
        (record.url == url).then_some(record)
    }

    pub fn put_url_record(&self, record: &UrlRecord) -> Result<()> {
        let json = serde_json::to_vec_pretty(record)?;
        write_atomically(&self.url_path(&record.url), &json)
    }

    /// What the last pull of `reference` gave, if anything.
    pub fn oci_record(&self, reference: &str) -> Option<OciRecord> {
        let text = fs::read(self.record_path("oci", reference)).ok()?;
        let record: OciRecord = serde_json::from_slice(&text).ok()?;
        (record.reference == reference).then_some(record)
    }

    pub fn put_oci_record(&self, record: &OciRecord) -> Result<()> {
        let json = serde_json::to_vec_pretty(record)?;
        write_atomically(&self.record_path("oci", &record.reference), &json)
    }

    fn blob_path(&self, digest: &Digest) -> PathBuf {
        self.dir
            .join("blobs")
            .join(format!("sha256-{}.wasm", digest.hex()))
    }

    fn url_path(&self, url: &str) -> PathBuf {
        self.record_path("urls", url)
    }

    /// `folder/<sha256 of key>.json`.
    fn record_path(&self, folder: &str, key: &str) -> PathBuf {
        let key = Digest::of(key.as_bytes()).hex();
        self.dir.join(folder).join(format!("{key}.json"))
    }
}

/// Write then rename, so a reader never sees half a file (the compile cache's way).
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    crate::supply::cache::write_renamed(path, &[bytes])
        .with_context(|| format!("writing {}", path.display()))
}
