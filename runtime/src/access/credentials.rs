//! Bearer credentials moat issues itself: the local token that `moat serve --http` requires when
//! nothing else is configured, and static API keys for machine clients without an authorization
//! server. moat keeps only their SHA-256, and compares digests in constant time.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest, Sha256};

/// Where the local token lives unless `[auth] token_file` or `--token-file` says otherwise:
/// `$MOAT_TOKEN_FILE`, else `$XDG_CONFIG_HOME/moat/http-token`, else
/// `~/.config/moat/http-token`.
pub fn default_token_file() -> Option<PathBuf> {
    if let Some(file) = std::env::var_os("MOAT_TOKEN_FILE").filter(|f| !f.is_empty()) {
        return Some(PathBuf::from(file));
    }
    let config = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".config")))?;
    Some(config.join("moat").join("http-token"))
}

/// The local token's file: `explicit` (`--token-file`), else `configured` (`[auth] token_file`),
/// else [`default_token_file`].
pub fn token_file(explicit: Option<PathBuf>, configured: Option<PathBuf>) -> Result<PathBuf> {
    explicit
        .or(configured)
        .or_else(default_token_file)
        .context("no place for the local token: set HOME, MOAT_TOKEN_FILE or --token-file")
}

/// A new random credential: `moat_` and 256 random bits.
pub fn generate() -> Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
    Ok(format!("moat_{}", URL_SAFE_NO_PAD.encode(bytes)))
}

/// The local token in `path`, created (with its folder, both private to their owner) when
/// missing. A token file its group or others may read is refused: it would be anyone's.
pub fn local_token(path: &Path) -> Result<String> {
    match std::fs::metadata(path) {
        Ok(metadata) => {
            let mode = metadata.permissions().mode();
            if mode & 0o077 != 0 {
                bail!(
                    "the token file {} is open to its group or others (mode {:03o}); make it \
                     private with `chmod 600 {}`",
                    path.display(),
                    mode & 0o777,
                    path.display()
                );
            }
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading the token file {}", path.display()))?;
            let token = text.trim();
            if token.len() < 16 {
                bail!(
                    "the token file {} holds no token of at least 16 characters",
                    path.display()
                );
            }
            Ok(token.to_string())
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => create_token_file(path),
        Err(error) => {
            Err(error).with_context(|| format!("reading the token file {}", path.display()))
        }
    }
}

fn create_token_file(path: &Path) -> Result<String> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .with_context(|| format!("creating {}", dir.display()))?;
    }
    let token = generate()?;
    // `create_new`: two moats starting at once must not each write a token of their own.
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(mut file) => {
            writeln!(file, "{token}")
                .with_context(|| format!("writing the token file {}", path.display()))?;
            tracing::info!("created the local bearer token in {}", path.display());
            Ok(token)
        }
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => local_token(path),
        Err(error) => {
            Err(error).with_context(|| format!("creating the token file {}", path.display()))
        }
    }
}

/// A credential's SHA-256.
pub fn digest(credential: &str) -> [u8; 32] {
    Sha256::digest(credential.as_bytes()).into()
}

/// `sha256:HEX`, the form in which moat.toml holds an API key.
pub fn hashed(credential: &str) -> String {
    let hex: String = digest(credential)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256:{hex}")
}

/// Reads `sha256:HEX` (64 hex digits).
pub fn parse_hashed(text: &str) -> Result<[u8; 32]> {
    let hex = text
        .strip_prefix("sha256:")
        .filter(|hex| hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
        .context("an API key is given by its hash, `sha256:` and 64 hex digits (`moat auth key NAME` makes one)")?;
    let mut digest = [0u8; 32];
    for (i, byte) in digest.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).expect("checked hex");
    }
    Ok(digest)
}

/// Whether two digests are equal, in time that does not depend on where they differ.
pub fn same_digest(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
}

/// The static API keys, by name.
#[derive(Clone, Debug, Default)]
pub struct ApiKeys {
    keys: Vec<(String, [u8; 32])>,
}

impl ApiKeys {
    pub fn new(keys: Vec<(String, [u8; 32])>) -> Self {
        Self { keys }
    }

    /// How many keys there are.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The name of the key `credential` is, comparing against every key whatever matches.
    pub fn find(&self, credential: &str) -> Option<&str> {
        let presented = digest(credential);
        let mut found = None;
        for (name, key) in &self.keys {
            if same_digest(key, &presented) {
                found = Some(name.as_str());
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_file_is_created_private_and_read_back() {
        let dir = std::env::temp_dir().join(format!("moat-token-{}", std::process::id()));
        let path = dir.join("sub").join("http-token");
        let token = local_token(&path).unwrap();
        assert!(token.starts_with("moat_") && token.len() > 40);
        assert_eq!(local_token(&path).unwrap(), token);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let error = local_token(&path).unwrap_err().to_string();
        assert!(error.contains("open to its group or others"), "{error}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn api_keys_are_found_by_their_hash() {
        let key = generate().unwrap();
        let keys = ApiKeys::new(vec![
            ("ci".into(), parse_hashed(&hashed(&key)).unwrap()),
            ("other".into(), digest("something else")),
        ]);
        assert_eq!(keys.find(&key), Some("ci"));
        assert_eq!(keys.find("moat_wrong"), None);
        assert!(parse_hashed("sha256:abc").is_err());
        assert!(parse_hashed(&key).is_err());
    }
}
