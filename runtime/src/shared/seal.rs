//! Sealing with a key derived from an operator's secret: ChaCha20-Poly1305, each value bound to
//! what it is kept under (its associated data), so that a value copied under another key does
//! not open there, and a changed byte does not open at all.

use anyhow::{Result, bail};
use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, Nonce, UnboundKey};
use sha2::{Digest, Sha256};

/// The shortest secret the credential store's key is derived from.
const MIN_SECRET_CHARS: usize = 32;

/// A key that seals bytes for one purpose (its `aad`): sealed under one purpose, they do not
/// open under another, and a changed byte does not open at all.
pub struct Seal {
    key: LessSafeKey,
}

impl Seal {
    /// The key derived from `secret`, which must be at least 32 characters.
    pub fn new(secret: &str) -> Result<Self> {
        if secret.chars().count() < MIN_SECRET_CHARS {
            bail!(
                "the credential store's key must be at least {MIN_SECRET_CHARS} characters \
                 (`openssl rand -hex 32` makes one)"
            );
        }
        Self::for_purpose("moat credential store key", secret.as_bytes())
    }

    /// A key for `purpose` derived from `secret` (checked long enough by whoever read it):
    /// what one purpose sealed, another's key does not open.
    pub fn for_purpose(purpose: &str, secret: &[u8]) -> Result<Self> {
        let derived = Sha256::digest([purpose.as_bytes(), b"\0", secret].concat());
        let key = UnboundKey::new(&CHACHA20_POLY1305, &derived)
            .map_err(|_| anyhow::anyhow!("the {purpose} is unusable"))?;
        Ok(Self {
            key: LessSafeKey::new(key),
        })
    }

    /// `plain` sealed for `aad`: a random nonce, then the ciphertext and its tag.
    pub fn seal(&self, plain: &[u8], aad: &[u8]) -> Result<Vec<u8>> {
        let mut nonce = [0u8; 12];
        getrandom::fill(&mut nonce).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
        let mut sealed = plain.to_vec();
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad),
                &mut sealed,
            )
            .map_err(|_| anyhow::anyhow!("sealing failed"))?;
        Ok([&nonce[..], &sealed].concat())
    }

    /// What `seal` sealed for `aad`; an error for anything else.
    pub fn open(&self, mut sealed: Vec<u8>, aad: &[u8]) -> Result<Vec<u8>> {
        if sealed.len() < 12 {
            bail!("too short");
        }
        let mut nonce = [0u8; 12];
        nonce.copy_from_slice(&sealed[..12]);
        let plain = self
            .key
            .open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad),
                &mut sealed[12..],
            )
            .map_err(|_| anyhow::anyhow!("not sealed with this key for this purpose"))?;
        Ok(plain.to_vec())
    }
}
