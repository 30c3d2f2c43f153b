//! Publisher signatures: minisign signatures over a component's exact bytes.
//!
//! A plugin `notes.wasm` is signed by a detached `notes.wasm.minisig`, the format of the
//! `minisign` tool, so publishers sign with the tool they already have (or `moat sign`) and
//! anyone can check a download with `minisign -V`. moat verifies in-process, with the small
//! dependency-free `minisign-verify` crate, over the very bytes it then hashes and compiles: the
//! signature, the digest the policy names and the compiled code all concern one buffer.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use base64::Engine as _;
use minisign_verify::{PublicKey, Signature};

/// A publisher's public key, under the name the policy gives it.
#[derive(Clone, Debug)]
pub struct TrustedKey {
    pub publisher: String,
    /// The key ID as `minisign` prints it (16 hex digits).
    pub id: String,
    key: PublicKey,
}

impl TrustedKey {
    /// A key from its base64 line (`RW…`, the second line of a `minisign.pub` file) or the
    /// whole file's text.
    pub fn parse(publisher: &str, text: &str) -> Result<Self> {
        let line = text
            .lines()
            .map(str::trim)
            .find(|line| !line.is_empty() && !line.starts_with("untrusted comment:"))
            .unwrap_or_default();
        let key = PublicKey::from_base64(line)
            .map_err(|e| anyhow::anyhow!("{e}"))
            .with_context(|| {
                format!("the key of publisher \"{publisher}\" is not a minisign public key")
            })?;
        Ok(Self {
            publisher: publisher.to_string(),
            id: key_id(line, 2)?,
            key,
        })
    }

    /// A key from a `minisign.pub` file, named after the file.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let name = path.file_stem().unwrap_or_default().to_string_lossy();
        Self::parse(&name, &text).with_context(|| format!("in {}", path.display()))
    }
}

/// Why a signature was not accepted.
#[derive(Debug, PartialEq)]
pub enum SignatureError {
    /// The signature file is not a minisign signature.
    Malformed(String),
    /// Made with a key the policy does not trust.
    UnknownKey { id: String },
    /// Made with a trusted key, but over other bytes: the component was changed after signing.
    Mismatch { publisher: String, id: String },
}

impl std::fmt::Display for SignatureError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SignatureError::Malformed(e) => {
                write!(f, "the signature is not a minisign signature: {e}")
            }
            SignatureError::UnknownKey { id } => write!(
                f,
                "the signature was made with key {id}, which is not a publisher key of the policy"
            ),
            SignatureError::Mismatch { publisher, id } => write!(
                f,
                "the signature by \"{publisher}\" (key {id}) does not match the component's bytes: \
                 the file was changed after it was signed"
            ),
        }
    }
}

impl std::error::Error for SignatureError {}

/// Where the detached signature of the plugin at `path` lives: `path` + `.minisig`.
pub fn signature_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".minisig");
    PathBuf::from(name)
}

/// The detached signature of the plugin at `path`, if it has one.
pub fn read_detached(path: &Path) -> Result<Option<String>> {
    let sig = signature_path(path);
    match std::fs::read_to_string(&sig) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", sig.display())),
    }
}

/// Checks `signature` over `wasm` against `keys`, and names the key that made it.
pub fn verify<'k>(
    wasm: &[u8],
    signature: &str,
    keys: &'k [TrustedKey],
) -> Result<&'k TrustedKey, SignatureError> {
    let parsed =
        Signature::decode(signature).map_err(|e| SignatureError::Malformed(e.to_string()))?;
    let id = signature
        .lines()
        .nth(1)
        .and_then(|line| key_id(line.trim(), 2).ok())
        .ok_or_else(|| SignatureError::Malformed("no signature line".into()))?;
    let key = keys
        .iter()
        .find(|k| k.id == id)
        .ok_or(SignatureError::UnknownKey { id: id.clone() })?;
    // Only prehashed signatures (minisign's default since 0.8): legacy ones hash nothing first.
    key.key
        .verify(wasm, &parsed, false)
        .map_err(|_| SignatureError::Mismatch {
            publisher: key.publisher.clone(),
            id,
        })?;
    Ok(key)
}

/// Signs the file at `path` with the minisign secret key at `secret_key`, writing
/// `path.minisig`. An encrypted key's password comes from `MOAT_SIGN_PASSWORD`, or is asked for.
pub fn sign_file(secret_key: &Path, path: &Path) -> Result<PathBuf> {
    let key_text = std::fs::read_to_string(secret_key)
        .with_context(|| format!("reading {}", secret_key.display()))?;
    let key = open_secret_key(&key_text)
        .with_context(|| format!("opening the secret key {}", secret_key.display()))?;
    let wasm = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let file_name = path.file_name().unwrap_or_default().to_string_lossy();
    let timestamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    // The same trusted comment as the minisign tool writes.
    let trusted = format!("timestamp:{timestamp}\tfile:{file_name}\thashed");
    let signature = minisign::sign(
        None,
        &key,
        wasm.as_slice(),
        Some(&trusted),
        Some("signature from moat sign"),
    )
    .map_err(|e| anyhow::anyhow!("{e}"))
    .context("signing")?;
    let out = signature_path(path);
    std::fs::write(&out, signature.to_string())
        .with_context(|| format!("writing {}", out.display()))?;
    Ok(out)
}

/// A minisign secret key file's key: unencrypted (`minisign -G -W`), or decrypted with the
/// password from `MOAT_SIGN_PASSWORD` (else asked for on the terminal).
fn open_secret_key(text: &str) -> Result<minisign::SecretKey> {
    let line = text
        .lines()
        .nth(1)
        .context("not a minisign secret key file")?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(line.trim())
        .context("not a minisign secret key file")?;
    // A public key is 42 bytes (algorithm, key ID, key); a secret key box is far longer.
    if bytes.len() == 42
        || text
            .lines()
            .next()
            .is_some_and(|l| l.contains("public key"))
    {
        bail!(
            "this is a minisign public key, which verifies signatures; sign with the secret key \
             (the .key file made with it)"
        );
    }
    // Bytes 2..4 name the key derivation; zero means the key is stored unencrypted. The
    // minisign tool writes an all-zero checksum for such keys, which the crate's
    // `from_unencrypted_box` refuses, so read the plain key directly.
    if bytes.get(2..4) == Some(&[0, 0]) {
        return minisign::SecretKey::from_bytes(&bytes).map_err(|e| anyhow::anyhow!("{e}"));
    }
    let password = std::env::var("MOAT_SIGN_PASSWORD").ok();
    minisign::SecretKey::from_box(text.to_string().into(), password)
        .map_err(|e| anyhow::anyhow!("{e}"))
}

/// The key ID in a base64 key or signature line, as minisign prints it: the 8 bytes after the
/// 2-byte algorithm, little-endian, in upper-case hex.
fn key_id(line: &str, offset: usize) -> Result<String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(line)
        .context("not base64")?;
    let Some(id) = bytes.get(offset..offset + 8) else {
        bail!("too short to hold a key ID");
    };
    Ok(id.iter().rev().map(|b| format!("{b:02X}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    // Fresh key pairs from the minisign crate; the integration tests use the real `minisign` tool.
    fn key_pair() -> (minisign::KeyPair, TrustedKey) {
        let pair = minisign::KeyPair::generate_unencrypted_keypair().unwrap();
        let public = pair.pk.to_base64();
        let trusted = TrustedKey::parse("acme", &public).unwrap();
        (pair, trusted)
    }

    fn sign(pair: &minisign::KeyPair, bytes: &[u8]) -> String {
        minisign::sign(Some(&pair.pk), &pair.sk, bytes, None, None)
            .unwrap()
            .to_string()
    }

    #[test]
    fn a_good_signature_names_its_publisher() {
        let (pair, key) = key_pair();
        let signature = sign(&pair, b"\0asm component");
        let keys = [key];
        let by = verify(b"\0asm component", &signature, &keys).unwrap();
        assert_eq!(by.publisher, "acme");
    }

    #[test]
    fn changed_bytes_unknown_keys_and_garbage_are_refused() {
        let (pair, key) = key_pair();
        let (other_pair, _) = key_pair();
        let signature = sign(&pair, b"\0asm component");
        let keys = [key.clone()];
        assert_eq!(
            verify(b"\0asm componenT", &signature, &keys).unwrap_err(),
            SignatureError::Mismatch {
                publisher: "acme".into(),
                id: key.id.clone()
            }
        );
        let foreign = sign(&other_pair, b"\0asm component");
        assert!(matches!(
            verify(b"\0asm component", &foreign, &keys).unwrap_err(),
            SignatureError::UnknownKey { .. }
        ));
        assert!(matches!(
            verify(b"\0asm component", "not a signature", &keys).unwrap_err(),
            SignatureError::Malformed(_)
        ));
    }

    #[test]
    fn key_ids_read_as_minisign_prints_them() {
        // From minisign-verify's documentation: key ID E7620F1842B4E81F.
        let key = TrustedKey::parse(
            "x",
            "RWQf6LRCGA9i53mlYecO4IzT51TGPpvWucNSCh1CBM0QTaLn73Y7GFO3",
        )
        .unwrap();
        assert_eq!(key.id, "E7620F1842B4E81F");
    }
}
