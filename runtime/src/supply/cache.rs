//! Compiled components on disk, so that a restart does not compile every plugin again.
//!
//! An entry is keyed by the component's sha256 and the engine's compatibility hash (wasmtime
//! version, target, settings), so a changed plugin or engine simply misses. Loading a compiled
//! artifact skips wasmtime's validation, so moat only ever loads what it wrote itself: every entry
//! ends with a keyed BLAKE3 tag under a key that only this cache folder's owner can read, and an
//! entry without a valid tag is ignored (and overwritten) rather than loaded.
//!
//! Checking that tag means hashing every compiled byte: ~90 MB for fifty plugins, a third of a
//! warm start. So once an entry has been written or checked, a *seal* beside it (`.seal`, keyed
//! like the tag) records the file's identity and change times: the device, inode, size, mtime
//! and ctime. A start whose entry still matches its seal skips the hash. Any write to the entry,
//! a rename over it or a copy changes what the seal records (the kernel sets ctime, and only
//! root can set the clock), and then the full tag is checked again. Both the tag and the seal
//! are only as secret as the key file, which the cache folder's owner can read: they keep out
//! other users and anything (a plugin's grant, a copied folder) that cannot read the key.

use std::fs;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use wasmtime::Engine;
use wasmtime::component::Component;

use crate::supply::source::Digest;

const TAG_LEN: usize = blake3::OUT_LEN;

/// How long moat, exiting, waits for compiled code still on its way to the cache. A host that
/// lists tools and quits (or `moat call`) would otherwise leave nothing, and every start of a
/// big plugin would be cold. MCP clients give a server 2 s between closing its stdin and
/// SIGTERM, and 2 s more before SIGKILL (a SIGTERM does not cut this wait short). Winch's code
/// of a 12 MB JavaScript component is ~50 MB, whose writing is ~0.2 s of file I/O; a debug
/// build, whose serializer is unoptimized, takes about 2 s.
pub const EXIT_WAIT: Duration = Duration::from_secs(3);

/// Writes to the cache not done yet, which moat's exit waits for.
static WRITES: Mutex<Writes> = Mutex::new(Writes {
    pending: 0,
    exiting: false,
});
static WRITTEN: Condvar = Condvar::new();

struct Writes {
    pending: usize,
    /// Set once the exit has waited: a write begun after it could not finish.
    exiting: bool,
}

/// A write to the cache to come or under way: moat's exit waits (up to [`EXIT_WAIT`]) until
/// every one is dropped.
pub struct Pending(());

impl Pending {
    /// None when moat is exiting.
    pub fn begin() -> Option<Self> {
        let mut writes = WRITES.lock().unwrap_or_else(|e| e.into_inner());
        if writes.exiting {
            return None;
        }
        writes.pending += 1;
        Some(Self(()))
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        let mut writes = WRITES.lock().unwrap_or_else(|e| e.into_inner());
        writes.pending -= 1;
        if writes.pending == 0 {
            WRITTEN.notify_all();
        }
    }
}

/// Waits, up to `within`, for every [`Pending`] write to end, then refuses new ones: what is
/// cached then is what the next start finds. Whether they all ended.
pub fn finish_writes(within: Duration) -> bool {
    let started = Instant::now();
    let writes = WRITES.lock().unwrap_or_else(|e| e.into_inner());
    let waiting = writes.pending;
    let (mut writes, timeout) = WRITTEN
        .wait_timeout_while(writes, within, |w| w.pending > 0)
        .unwrap_or_else(|e| e.into_inner());
    writes.exiting = true;
    if timeout.timed_out() {
        // Not a fault: the next start compiles again, which is all it costs.
        tracing::info!(
            "stopping before compiled code reached the cache ({} writes not done after {} ms): \
             the next start compiles again",
            writes.pending,
            within.as_millis()
        );
        return false;
    }
    if waiting > 0 {
        tracing::debug!(
            "waited {} ms for compiled code to reach the cache",
            started.elapsed().as_millis()
        );
    }
    true
}

/// A cache folder and the key that signs its entries.
#[derive(Clone)]
pub struct Cache {
    dir: PathBuf,
    key: [u8; 32],
}

impl Cache {
    /// The folder named by `MOAT_CACHE_DIR`, else `$XDG_CACHE_HOME/moat`, else `~/.cache/moat`.
    pub fn default_dir() -> Option<PathBuf> {
        if let Some(dir) = std::env::var_os("MOAT_CACHE_DIR") {
            return Some(dir.into());
        }
        let base = std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".cache")))?;
        Some(base.join("moat"))
    }

    /// Opens (creating it if need be) a cache folder that only the current user can write.
    pub fn open(dir: &Path) -> Result<Self> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .with_context(|| format!("creating the cache folder {}", dir.display()))?;
        check_private(dir)?;
        let key_path = dir.join("key");
        let key = match fs::read(&key_path) {
            Ok(key) => key_from(&key_path, key)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => new_key(&key_path)?,
            Err(e) => return Err(e).with_context(|| format!("reading {}", key_path.display())),
        };
        Ok(Self {
            dir: dir.to_path_buf(),
            key,
        })
    }

    /// The cache folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The compiled component for `wasm` (whose sha256 is `digest`): from the cache when a valid
    /// entry is there, otherwise compiled now and stored. A cache that cannot be written costs
    /// only the next start.
    pub fn component(&self, engine: &Engine, wasm: &[u8], digest: &Digest) -> Result<Component> {
        match self.cached(engine, digest) {
            Some(component) => Ok(component),
            None => self.compile(engine, wasm, digest),
        }
    }

    /// The component whose sha256 is `digest`, compiled for `engine`, if a valid entry has it.
    pub fn cached(&self, engine: &Engine, digest: &Digest) -> Option<Component> {
        let path = self.entry_path(engine, digest);
        if !self.entry_is_trusted(&path) {
            return None;
        }
        // SAFETY: the seal or the tag proves this process's user wrote these bytes with
        // `serialize` for this very engine configuration (the key and the engine hash are in
        // the path and tag).
        // wasmtime maps the file instead of copying it (only the pages in use become
        // resident, and start-up copies nothing); that is sound because entries are only ever
        // replaced by a rename, never rewritten in place. The tag after the artifact is
        // outside every section wasmtime reads.
        match unsafe { Component::deserialize_file(engine, &path) } {
            Ok(component) => Some(component),
            Err(e) => {
                tracing::warn!("ignoring cache entry {}: {e}", path.display());
                None
            }
        }
    }

    /// Compiles `wasm` (whose sha256 is `digest`) for `engine` and stores the code.
    pub fn compile(&self, engine: &Engine, wasm: &[u8], digest: &Digest) -> Result<Component> {
        let component = Component::new(engine, wasm).map_err(anyhow::Error::from)?;
        self.store(engine, digest, &component);
        Ok(component)
    }

    /// Stores `component`, compiled for `engine` from the bytes whose sha256 is `digest`. A
    /// cache that cannot be written costs only the next start.
    pub fn store(&self, engine: &Engine, digest: &Digest, component: &Component) {
        let Some(_writing) = Pending::begin() else {
            tracing::debug!("not caching a compiled plugin: moat is exiting");
            return;
        };
        let path = self.entry_path(engine, digest);
        match component.serialize() {
            Ok(artifact) => {
                if let Err(e) = self.write_entry(&path, &artifact) {
                    tracing::warn!("could not cache a compiled plugin: {e:#}");
                }
            }
            Err(e) => tracing::warn!("could not serialize a compiled plugin: {e}"),
        }
    }

    /// Removes every entry (and the key): how many compiled plugins went.
    pub fn clear(dir: &Path) -> Result<usize> {
        let mut removed = 0;
        let entries = match fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(e).with_context(|| format!("reading {}", dir.display())),
        };
        for entry in entries {
            let path = entry?.path();
            let ours = path
                .extension()
                .is_some_and(|e| e == "cwasm" || e == "seal")
                || path.file_name().is_some_and(|n| n == "key");
            if ours {
                fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
                removed += usize::from(path.extension().is_some_and(|e| e == "cwasm"));
            }
        }
        Ok(removed)
    }

    fn entry_path(&self, engine: &Engine, digest: &Digest) -> PathBuf {
        let mut hasher = DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        env!("CARGO_PKG_VERSION").hash(&mut hasher);
        self.dir
            .join(format!("{}-{:016x}.cwasm", digest.hex(), hasher.finish()))
    }

    /// Whether the entry at `path` may be loaded: it matches its seal, or else its tag (and is
    /// sealed now, so the next start skips the hash).
    fn entry_is_trusted(&self, path: &Path) -> bool {
        if self.entry_is_sealed(path) {
            return true;
        }
        if !self.entry_is_valid(path) {
            return false;
        }
        self.seal(path);
        true
    }

    /// Whether the entry at `path` is the very file its seal describes.
    fn entry_is_sealed(&self, path: &Path) -> bool {
        let seal_path = path.with_extension("seal");
        let (Ok(seal), Some(expected)) = (fs::read(&seal_path), self.seal_of(path)) else {
            return false;
        };
        check_private(&seal_path).is_ok()
            && blake3::Hash::from_slice(&seal).is_ok_and(|seal| seal == expected)
    }

    /// Writes the seal of the entry at `path`, checked or written just now. Without one, the
    /// next start checks the tag instead.
    fn seal(&self, path: &Path) {
        let written = self
            .seal_of(path)
            .context("the entry is gone")
            .and_then(|seal| write_renamed(&path.with_extension("seal"), &[seal.as_bytes()]));
        if let Err(e) = written {
            tracing::debug!("no seal for cache entry {}: {e:#}", path.display());
        }
    }

    /// The keyed hash of the entry's name and of what the file system says of it.
    fn seal_of(&self, path: &Path) -> Option<blake3::Hash> {
        let meta = fs::metadata(path).ok()?;
        let mut seal = self.mac(path);
        seal.update(b"\0seal"); // never mistaken for an entry's tag
        for field in [
            meta.dev(),
            meta.ino(),
            meta.size(),
            meta.mtime() as u64,
            meta.mtime_nsec() as u64,
            meta.ctime() as u64,
            meta.ctime_nsec() as u64,
            u64::from(meta.mode()),
            u64::from(meta.uid()),
        ] {
            seal.update(&field.to_le_bytes());
        }
        Some(seal.finalize())
    }

    /// Whether `path` is an entry this cache wrote: private, with a tag that matches. The
    /// file is mapped, not read, so checking it copies nothing and leaves its pages in the
    /// page cache for wasmtime's own mapping.
    fn entry_is_valid(&self, path: &Path) -> bool {
        let Ok(file) = fs::File::open(path) else {
            return false;
        };
        let len = file.metadata().map_or(0, |m| m.len());
        if check_private(path).is_err() || len < TAG_LEN as u64 {
            tracing::warn!(
                "ignoring cache entry {}: not written by moat",
                path.display()
            );
            return false;
        }
        // SAFETY: entries are replaced by a rename, never written in place, so the mapped file
        // does not change under the slice; if someone wrote it anyway, the worst outcome is a
        // tag that does not match.
        let entry = match unsafe { memmap2::Mmap::map(&file) } {
            Ok(entry) => entry,
            Err(e) => {
                tracing::warn!("ignoring cache entry {}: {e}", path.display());
                return false;
            }
        };
        let (artifact, tag) = entry.split_at(entry.len() - TAG_LEN);
        let mut mac = self.mac(path);
        mac.update(artifact);
        // `blake3::Hash` compares in constant time.
        if mac.finalize() != blake3::Hash::from_slice(tag).expect("TAG_LEN bytes") {
            tracing::warn!(
                "ignoring cache entry {}: its tag does not match",
                path.display()
            );
            return false;
        }
        true
    }

    fn write_entry(&self, path: &Path, artifact: &[u8]) -> Result<()> {
        let mut mac = self.mac(path);
        mac.update(artifact);
        let tag = mac.finalize();
        write_renamed(path, &[artifact, tag.as_bytes()])?;
        self.seal(path);
        Ok(())
    }

    /// The tag also covers the entry's name, so an entry cannot pass for another component's.
    fn mac(&self, path: &Path) -> blake3::Hasher {
        let mut mac = blake3::Hasher::new_keyed(&self.key);
        mac.update(path.file_name().unwrap_or_default().as_encoded_bytes());
        mac
    }
}

/// Refuses a file or folder that someone else owns or could write.
fn check_private(path: &Path) -> Result<()> {
    let meta = fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc_geteuid() };
    if meta.uid() != uid || meta.permissions().mode() & 0o022 != 0 {
        bail!(
            "{} must belong to the current user and be writable by nobody else",
            path.display()
        );
    }
    Ok(())
}

unsafe extern "C" {
    #[link_name = "geteuid"]
    fn libc_geteuid() -> u32;
}

fn key_from(path: &Path, bytes: Vec<u8>) -> Result<[u8; 32]> {
    check_private(path)?;
    bytes
        .try_into()
        .map_err(|_| anyhow::anyhow!("{} is not a moat cache key", path.display()))
}

/// A new key at `path`, or the one another process put there first: replicas sharing a cache
/// folder may open it empty at the same moment, and all of them must sign with one key. The key
/// is written whole beside `path` and hard-linked in, which fails when `path` exists, so no
/// process ever reads half a key or replaces one another already signs with.
fn new_key(path: &Path) -> Result<[u8; 32]> {
    let mut key = [0u8; 32];
    getrandom::fill(&mut key).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
    let temp = write_temp(path, &[&key]).with_context(|| format!("creating {}", path.display()))?;
    let linked = fs::hard_link(&temp, path);
    let _ = fs::remove_file(&temp);
    match linked {
        Ok(()) => Ok(key),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let theirs = fs::read(path).with_context(|| format!("reading {}", path.display()))?;
            key_from(path, theirs)
        }
        Err(e) => Err(e).with_context(|| format!("creating {}", path.display())),
    }
}

/// Writes `parts` to a private temp file, then renames it to `path`, so a reader never sees half
/// a file.
pub(crate) fn write_renamed(path: &Path, parts: &[&[u8]]) -> Result<()> {
    let temp = write_temp(path, parts)?;
    fs::rename(&temp, path)?;
    Ok(())
}

/// Writes `parts` to a new private file beside `path`, synced, and returns its name. The counter
/// keeps two writers in this process (two plugins with the same bytes, two fetches of one URL)
/// from sharing a temp file.
fn write_temp(path: &Path, parts: &[&[u8]]) -> Result<PathBuf> {
    static WRITES: AtomicU64 = AtomicU64::new(0);
    let write = WRITES.fetch_add(1, Ordering::Relaxed);
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".tmp{}-{write}", std::process::id()));
    let temp = PathBuf::from(name);
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temp)?;
    for part in parts {
        file.write_all(part)?;
    }
    file.sync_all()?;
    Ok(temp)
}
