//! The sha256 of a component, written `sha256:<64 hex digits>` as OCI registries write digests.

use std::fmt;
use std::str::FromStr;

use anyhow::{Context, bail};
use sha2::{Digest as _, Sha256};

/// The sha256 of a component's bytes: what identifies a plugin whatever its source.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest([u8; 32]);

impl Digest {
    pub fn of(bytes: &[u8]) -> Self {
        Self(Sha256::digest(bytes).into())
    }

    /// The 64 hex digits, without the `sha256:` prefix.
    pub fn hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// A hasher for bytes that arrive in pieces.
    pub fn hasher() -> Hasher {
        Hasher(Sha256::new())
    }
}

/// Computes a [`Digest`] piece by piece.
pub struct Hasher(Sha256);

impl Hasher {
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    pub fn finish(self) -> Digest {
        Digest(self.0.finalize().into())
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.hex())
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl FromStr for Digest {
    type Err = anyhow::Error;

    fn from_str(text: &str) -> anyhow::Result<Self> {
        let hex = text
            .strip_prefix("sha256:")
            .with_context(|| format!("digest \"{text}\" does not start with sha256:"))?;
        if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            bail!("digest \"{text}\" must be sha256: and 64 hex digits");
        }
        let mut bytes = [0u8; 32];
        for (i, byte) in bytes.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).expect("checked hex digits");
        }
        Ok(Self(bytes))
    }
}

impl serde::Serialize for Digest {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Digest {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_text() {
        let digest = Digest::of(b"moat");
        let text = digest.to_string();
        assert!(text.starts_with("sha256:") && text.len() == 71, "{text}");
        assert_eq!(text.parse::<Digest>().unwrap(), digest);
        let mut hasher = Digest::hasher();
        hasher.update(b"mo");
        hasher.update(b"at");
        assert_eq!(hasher.finish(), digest);
        for bad in ["", "sha512:00", "sha256:xyz", &text[..70]] {
            assert!(bad.parse::<Digest>().is_err(), "{bad}");
        }
    }
}
