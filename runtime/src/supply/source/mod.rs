//! Where plugins come from: a local file, a folder of them, an `https://` URL or an OCI registry.
//!
//! A [`Source`] is parsed from the string an operator writes (`notes.wasm`, `plugins/`,
//! `https://example.com/notes.wasm`, `oci://ghcr.io/acme/notes:1.2`); [`Fetcher::fetch`] turns it
//! into the component's bytes, their sha256 and a note of where they came from. Whatever the
//! source, a plugin is identified by that sha256: it is what `moat.lock` pins.
//!
//! Downloads are kept in moat's cache folder (`sources/`): components by digest, and for each URL
//! its validators (`ETag`, `Last-Modified`), so an unchanged file is revalidated, not downloaded
//! again. Everything read back from there is hashed again, so a changed cache entry is noticed.
//! Plain HTTP is refused except to loopback hosts, for URLs and registries alike.

mod digest;
pub mod oci;
mod progress;
mod store;
mod url;

use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::{Context, Result, bail};

pub use digest::Digest;
pub use oci::OciSource;
pub use progress::Progress;
pub use store::Store;

/// The largest component moat downloads.
pub const MAX_COMPONENT_BYTES: u64 = 256 << 20;

/// How long one download or pull may take in all, unless `MOAT_FETCH_TIMEOUT_SECS` says.
pub const DEFAULT_FETCH_TIMEOUT_SECS: u64 = 300;

const FETCH_TIMEOUT_VAR: &str = "MOAT_FETCH_TIMEOUT_SECS";

/// Where one plugin (or, for a folder, several) comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// A `.wasm` file on this machine.
    File(PathBuf),
    /// A folder: every `.wasm` file in it is a plugin.
    Dir(PathBuf),
    /// A component at an `https://` URL (or `http://` on a loopback host).
    Url(reqwest::Url),
    /// A Wasm OCI artifact: `oci://host[:port]/repo:tag` or `oci://host/repo@sha256:…`.
    Oci(OciSource),
}

/// A fetched component.
#[derive(Clone, Debug)]
pub struct Fetched {
    pub wasm: Vec<u8>,
    /// The sha256 of `wasm`.
    pub digest: Digest,
    /// Where the bytes came from, for people: a path, a URL, a registry reference with its
    /// manifest digest, each with a note when they came from the cache.
    pub origin: String,
    /// The publisher's detached minisign signature that came with the bytes: `FILE.minisig`
    /// beside a file, `URL.minisig` beside a URL, an annotation of a registry artifact's layer.
    /// Where it came from does not matter: it is verified against the bytes, by the policy.
    pub signature: Option<String>,
}

impl Source {
    /// Parses what an operator wrote; a relative path is taken relative to `base`.
    pub fn parse(text: &str, base: &Path) -> Result<Self> {
        if let Some(rest) = text.strip_prefix("oci://") {
            return Ok(Self::Oci(OciSource::parse(rest)?));
        }
        if text.starts_with("https://") || text.starts_with("http://") {
            let url = reqwest::Url::parse(text).with_context(|| format!("\"{text}\" is no URL"))?;
            url::check_scheme(&url)?;
            return Ok(Self::Url(url));
        }
        if let Some((scheme, _)) = text.split_once("://") {
            bail!(
                "\"{text}\": unknown source scheme \"{scheme}\" (use a path, https:// or oci://)"
            );
        }
        let path = base.join(text);
        Ok(if path.is_dir() {
            Self::Dir(path)
        } else {
            Self::File(path)
        })
    }

    /// The plugin name this source suggests: the file's stem, or the last part of the URL's path
    /// or of the repository, in `[A-Za-z0-9_]` (`text-tools.wasm` → `text_tools`).
    pub fn default_name(&self) -> String {
        let last = match self {
            Self::File(path) | Self::Dir(path) => path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default(),
            Self::Url(url) => {
                let segment = url.path_segments().and_then(|mut s| s.next_back());
                let segment = segment.unwrap_or_default();
                segment.strip_suffix(".wasm").unwrap_or(segment).to_string()
            }
            Self::Oci(oci) => oci.name(),
        };
        crate::wit::naming::sanitize(&last)
    }

    /// The plugins a source stands for: itself, or for a folder each `.wasm` file in it, in name
    /// order, named after their files.
    pub fn expand(&self) -> Result<Vec<(String, Source)>> {
        let Self::Dir(dir) = self else {
            return Ok(vec![(self.default_name(), self.clone())]);
        };
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .with_context(|| format!("reading {}", dir.display()))?
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "wasm") && p.is_file())
            .collect();
        files.sort();
        Ok(files
            .into_iter()
            .map(|path| {
                let source = Self::File(path);
                (source.default_name(), source)
            })
            .collect())
    }

    /// Checks that a local source is there without reading it whole: a folder, or a file that
    /// starts as WebAssembly does. A URL or registry is checked when it is fetched.
    pub fn check_local(&self) -> Result<()> {
        use std::io::Read;
        let Self::File(path) = self else {
            return Ok(());
        };
        let mut head = [0; 4];
        std::fs::File::open(path)
            .and_then(|mut file| file.read_exact(&mut head))
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::UnexpectedEof => not_wasm(path),
                std::io::ErrorKind::NotFound => {
                    anyhow::anyhow!("no plugin at {}: no such file or folder", path.display())
                }
                _ => anyhow::Error::new(e).context(format!("reading {}", path.display())),
            })?;
        if head != WASM_MAGIC {
            return Err(not_wasm(path));
        }
        Ok(())
    }

    /// Reads a local file source; other sources need a [`Fetcher`].
    pub fn read_local(&self) -> Result<Fetched> {
        match self {
            Self::File(path) => {
                let wasm = crate::supply::source::read_wasm(path)?;
                check_component(&wasm).with_context(|| path.display().to_string())?;
                Ok(Fetched {
                    digest: Digest::of(&wasm),
                    wasm,
                    origin: path.display().to_string(),
                    signature: crate::supply::signing::read_detached(path)?,
                })
            }
            Self::Dir(path) => bail!("{} is a folder, not one plugin", path.display()),
            Self::Url(_) | Self::Oci(_) => bail!("{self} must be fetched, it is not a local file"),
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::File(path) | Self::Dir(path) => write!(f, "{}", path.display()),
            Self::Url(url) => write!(f, "{url}"),
            Self::Oci(oci) => write!(f, "{oci}"),
        }
    }
}

/// Looks up an environment variable (registry credentials, `DOCKER_CONFIG`, `HOME`,
/// `MOAT_FETCH_TIMEOUT_SECS`).
pub type EnvLookup = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// Fetches sources: the HTTP client, the download store and the progress display they share.
pub struct Fetcher {
    /// Made on first use: setting it up reads every system CA certificate, a cost a start
    /// with only local plugins should not pay.
    http: OnceLock<reqwest::Client>,
    store: Option<Store>,
    progress: Progress,
    env: EnvLookup,
}

impl Fetcher {
    /// A fetcher keeping downloads in `store` (none: every fetch downloads anew), showing
    /// `progress`.
    pub fn new(store: Option<Store>, progress: Progress) -> Self {
        Self {
            http: OnceLock::new(),
            store,
            progress,
            env: Arc::new(|name| std::env::var(name).ok()),
        }
    }

    fn http(&self) -> Result<&reqwest::Client> {
        if let Some(http) = self.http.get() {
            return Ok(http);
        }
        install_tls_provider();
        let http = reqwest::Client::builder()
            .user_agent(concat!("moat/", env!("CARGO_PKG_VERSION")))
            .redirect(url::redirect_policy())
            .connect_timeout(Duration::from_secs(30))
            .build()
            .context("setting up the HTTP client")?;
        Ok(self.http.get_or_init(|| http))
    }

    /// Reads registry credentials and the docker configuration's place through `env` instead of
    /// moat's environment.
    pub fn with_env(mut self, env: EnvLookup) -> Self {
        self.env = env;
        self
    }

    /// A fetcher with the store in moat's cache folder (if there is one) and a progress bar when
    /// stderr is a terminal.
    pub fn from_env() -> Self {
        let store = Store::default_dir().and_then(|dir| {
            Store::open(&dir)
                .inspect_err(|e| tracing::warn!("downloads will not be kept: {e:#}"))
                .ok()
        });
        Self::new(store, Progress::for_stderr())
    }

    /// The component a source names. A folder is an error here: [`Source::expand`] it first.
    /// A download or pull that takes longer than [`Fetcher::deadline`] in all is given up, so
    /// a server that trickles its answer cannot hold moat's start forever.
    pub async fn fetch(&self, source: &Source) -> Result<Fetched> {
        let remote = match source {
            Source::File(_) | Source::Dir(_) => return source.read_local(),
            Source::Url(_) | Source::Oci(_) => self.fetch_remote(source),
        };
        let deadline = self.deadline()?;
        match tokio::time::timeout(deadline, remote).await {
            Ok(fetched) => fetched,
            Err(_) => bail!(
                "{source}: not fetched within {} s, given up (set {FETCH_TIMEOUT_VAR} to allow \
                 longer)",
                deadline.as_secs()
            ),
        }
    }

    async fn fetch_remote(&self, source: &Source) -> Result<Fetched> {
        match source {
            Source::Url(url) => {
                let http = self.http()?;
                let store = self.store.as_ref();
                let mut fetched = url::fetch(http, store, url, &self.progress).await?;
                fetched.signature = url::fetch_signature(http, store, url, &fetched.digest).await;
                Ok(fetched)
            }
            Source::Oci(oci) => {
                oci.pull(self.store.as_ref(), &self.progress, &*self.env)
                    .await
            }
            Source::File(_) | Source::Dir(_) => source.read_local(),
        }
    }

    /// How long one fetch may take in all: `MOAT_FETCH_TIMEOUT_SECS`, else
    /// [`DEFAULT_FETCH_TIMEOUT_SECS`].
    pub fn deadline(&self) -> Result<Duration> {
        let Some(text) = (self.env)(FETCH_TIMEOUT_VAR) else {
            return Ok(Duration::from_secs(DEFAULT_FETCH_TIMEOUT_SECS));
        };
        match text.trim().parse::<u64>() {
            Ok(secs) if secs > 0 => Ok(Duration::from_secs(secs)),
            _ => bail!("{FETCH_TIMEOUT_VAR}=\"{text}\" is not a whole number of seconds above 0"),
        }
    }

    /// Publishes a component to `target` as a Wasm OCI artifact, with its detached signature
    /// if it has one.
    pub async fn push(
        &self,
        target: &OciSource,
        wasm: &[u8],
        signature: Option<&str>,
    ) -> Result<oci::Pushed> {
        let spinner = self.progress.spinner(&format!("pushing to {target}"));
        let pushed = target.push(wasm, signature, &*self.env).await;
        spinner.finish_and_clear();
        pushed
    }

    pub fn progress(&self) -> &Progress {
        &self.progress
    }
}

/// Refuses bytes that are not a WebAssembly component, saying what they are instead.
pub fn check_component(wasm: &[u8]) -> Result<()> {
    const COMPONENT: [u8; 4] = [0x0d, 0x00, 0x01, 0x00];
    const MODULE: [u8; 4] = [0x01, 0x00, 0x00, 0x00];
    if !wasm.starts_with(b"\0asm") {
        let head: String = String::from_utf8_lossy(&wasm[..wasm.len().min(40)])
            .chars()
            .map(|c| if c.is_control() { '.' } else { c })
            .collect();
        bail!(
            "not a WebAssembly component: it does not start with \\0asm (it starts with \"{head}\")"
        );
    }
    match wasm.get(4..8) {
        Some(version) if version == COMPONENT => Ok(()),
        Some(version) if version == MODULE => bail!(
            "a core WebAssembly module, not a component: build it for wasm32-wasip2 (or wrap it \
             with `wasm-tools component new`)"
        ),
        _ => bail!("not a WebAssembly component: unknown version or layer"),
    }
}

/// Whether `host` is this machine: `localhost`, 127.0.0.0/8 or `::1`.
pub fn is_loopback(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// rustls needs one process-wide crypto provider: ring, as wasmtime's HTTP stack uses.
pub fn install_tls_provider() {
    // An error only means one is installed already.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Fetches every plugin's component at once (downloads run side by side), in order.
pub async fn fetch_all(
    fetcher: &Fetcher,
    sources: &[crate::supply::PluginSource],
) -> Vec<Result<Fetched>> {
    // Local files are read and hashed on every core at once, off the async runtime.
    let local: Vec<(usize, Source)> = sources
        .iter()
        .enumerate()
        .filter(|(_, s)| matches!(s.source, Source::File(_)))
        .map(|(i, s)| (i, s.source.clone()))
        .collect();
    let reading = tokio::task::spawn_blocking(move || {
        crate::parallel::map(local, |(i, source)| (i, source.read_local()))
    });
    let mut fetched: Vec<Option<Result<Fetched>>> =
        futures_util::future::join_all(sources.iter().map(|s| async {
            match s.source {
                Source::File(_) => None,
                _ => Some(fetcher.fetch(&s.source).await),
            }
        }))
        .await;
    match reading.await {
        Ok(read) => {
            for (i, result) in read {
                fetched[i] = Some(result);
            }
        }
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
    fetched
        .into_iter()
        .map(|f| f.expect("every source fetched or read"))
        .collect()
}

/// Reads a plugin file, with the path in the error.
pub fn read_wasm(path: &std::path::Path) -> Result<Vec<u8>> {
    let wasm = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    if !wasm.starts_with(WASM_MAGIC) {
        return Err(not_wasm(path));
    }
    Ok(wasm)
}

const WASM_MAGIC: &[u8] = b"\0asm";

/// The refusal of a file that is not WebAssembly. A `.toml` where a plugin goes is most likely
/// a moat.toml given without its flag, which the refusal names.
fn not_wasm(path: &Path) -> anyhow::Error {
    let shown = path.display();
    if path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("toml"))
    {
        anyhow::anyhow!("{shown} is not a WebAssembly file: did you mean `--config {shown}`?")
    } else {
        anyhow::anyhow!("{shown} is not a WebAssembly file")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_local_source_is_checked_and_a_toml_is_told_its_flag() {
        let dir = std::env::temp_dir().join(format!("moat-check-local-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = |name: &str, bytes: &[u8]| {
            let path = dir.join(name);
            std::fs::write(&path, bytes).unwrap();
            Source::File(path)
        };
        assert!(file("ok.wasm", b"\0asm\x0d\0\x01\0").check_local().is_ok());
        assert!(Source::Dir(dir.clone()).check_local().is_ok());
        let missing = Source::File(dir.join("gone.wasm"))
            .check_local()
            .unwrap_err();
        assert!(missing.to_string().starts_with("no plugin at"), "{missing}");
        let toml = file("moat.toml", b"[plugins.x]\n")
            .check_local()
            .unwrap_err();
        let shown = dir.join("moat.toml").display().to_string();
        assert_eq!(
            toml.to_string(),
            format!("{shown} is not a WebAssembly file: did you mean `--config {shown}`?")
        );
        let short = file("tiny.wasm", b"\0a").check_local().unwrap_err();
        assert!(
            short.to_string().ends_with("is not a WebAssembly file"),
            "{short}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn parses_every_kind() {
        let base = Path::new("/etc/moat");
        assert_eq!(
            Source::parse("n.wasm", base).unwrap(),
            Source::File("/etc/moat/n.wasm".into())
        );
        let url = Source::parse("https://example.com/a/text-tools.wasm", base).unwrap();
        assert_eq!(url.default_name(), "text_tools");
        let oci = Source::parse("oci://127.0.0.1:5000/acme/notes:1.0", base).unwrap();
        assert_eq!(oci.to_string(), "oci://127.0.0.1:5000/acme/notes:1.0");
        assert_eq!(oci.default_name(), "notes");
        Source::parse("http://127.0.0.1:8080/n.wasm", base).unwrap();
        Source::parse("http://localhost/n.wasm", base).unwrap();
        Source::parse("http://[::1]:1/n.wasm", base).unwrap();

        for (bad, expected) in [
            ("http://example.com/n.wasm", "plain http"),
            ("ftp://example.com/n.wasm", "unknown source scheme"),
            ("oci://", "reference"),
        ] {
            let error = format!("{:#}", Source::parse(bad, base).unwrap_err());
            assert!(error.contains(expected), "{bad}: {error}");
        }
    }

    #[test]
    fn tells_modules_and_other_files_from_components() {
        assert!(check_component(b"\0asm\x0d\x00\x01\x00").is_ok());
        let module = check_component(b"\0asm\x01\x00\x00\x00").unwrap_err();
        assert!(module.to_string().contains("core WebAssembly module"));
        let html = check_component(b"<html>Not Found</html>").unwrap_err();
        assert!(html.to_string().contains("<html>"), "{html}");
    }

    #[test]
    fn loopback_hosts() {
        for host in ["localhost", "127.0.0.1", "127.8.0.1", "[::1]", "::1"] {
            assert!(is_loopback(host), "{host}");
        }
        for host in ["example.com", "10.0.0.1", "localhost.example.com", "[::2]"] {
            assert!(!is_loopback(host), "{host}");
        }
    }
}
