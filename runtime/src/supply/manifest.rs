//! A plugin's permission manifest: what the plugin says it needs.
//!
//! The guest SDK's build step writes it from `[package.metadata.moat]` in the plugin's
//! `Cargo.toml` into a `moat:manifest` custom section, as JSON:
//!
//! ```json
//! {"files": [{"guest": "/notes", "mode": "rw"}], "env": ["NOTES_TITLE"],
//!  "network": ["https://api.example.org"], "max_memory_mb": 32, "deadline_ms": 2000}
//! ```
//!
//! A manifest asks; it grants nothing. What a plugin gets is what it asks for, cut down to what
//! the operator granted and what the policy allows (see [`crate::supply::policy`]).

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::sandbox::network::NetworkGrant;

/// The name of the custom section that carries the manifest.
pub const MANIFEST_SECTION: &str = "moat:manifest";

/// What a plugin asks for.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Directories, by the guest path the plugin expects them at.
    #[serde(default)]
    pub files: Vec<RequestedDir>,
    /// Names of environment variables.
    #[serde(default)]
    pub env: Vec<String>,
    /// Keys of the settings it reads through `wasi:config/store`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub config: Vec<String>,
    /// Hosts the plugin would reach, as host patterns (`https://api.example.org`, `*.example.org:443`).
    #[serde(default)]
    pub network: Vec<NetworkGrant>,
    /// The linear memory the plugin needs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_memory_mb: Option<usize>,
    /// The longest a call needs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_ms: Option<u64>,
}

impl Manifest {
    /// Each request on a line of its own (`files /notes rw`, `env NOTES_TITLE`,
    /// `network https://api.example.org`, `max_memory_mb 32`), in a stable order: what a lock
    /// file records, and what `moat lock` compares between two versions.
    pub fn requests(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .files
            .iter()
            .map(|dir| format!("files {} {}", dir.guest, dir.mode.as_str()))
            .collect();
        lines.extend(self.env.iter().map(|name| format!("env {name}")));
        lines.extend(self.config.iter().map(|key| format!("config {key}")));
        lines.extend(self.network.iter().map(|grant| format!("network {grant}")));
        lines.extend(self.max_memory_mb.map(|mb| format!("max_memory_mb {mb}")));
        lines.extend(self.deadline_ms.map(|ms| format!("deadline_ms {ms}")));
        lines
    }
}

/// A directory the plugin asks for.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestedDir {
    pub guest: String,
    pub mode: Mode,
}

/// Read-only or read-write; read-only is the narrower.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Mode {
    #[serde(rename = "ro")]
    ReadOnly,
    #[serde(rename = "rw")]
    ReadWrite,
}

impl Mode {
    pub fn from_writable(writable: bool) -> Self {
        if writable {
            Mode::ReadWrite
        } else {
            Mode::ReadOnly
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Mode::ReadOnly => "ro",
            Mode::ReadWrite => "rw",
        }
    }
}

/// The manifest in a component, `None` when it has none. A manifest that is there but cannot be
/// read is an error: the plugin then does not load, rather than load with unknown needs.
pub fn read(wasm: &[u8]) -> Result<Option<Manifest>> {
    let Some(section) = crate::wit::docs::find_custom_section(wasm, MANIFEST_SECTION)? else {
        return Ok(None);
    };
    let manifest: Manifest = serde_json::from_slice(section)
        .with_context(|| format!("the `{MANIFEST_SECTION}` section is not a valid manifest"))?;
    crate::sandbox::limits::in_bytes(manifest.max_memory_mb, 20, "the manifest's max_memory_mb")?;
    for dir in &manifest.files {
        if !dir.guest.starts_with('/') || dir.guest.split('/').any(|part| part == "..") {
            anyhow::bail!(
                "the manifest asks for guest path \"{}\", which is not absolute or holds `..`",
                dir.guest
            );
        }
    }
    Ok(Some(manifest))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A core module holding one custom section (enough for the section scan).
    fn module_with(name: &str, data: &[u8]) -> Vec<u8> {
        let mut payload = vec![name.len() as u8];
        payload.extend_from_slice(name.as_bytes());
        payload.extend_from_slice(data);
        let mut wasm = b"\0asm\x01\0\0\0".to_vec();
        wasm.push(0); // custom section id
        assert!(payload.len() < 128, "one-byte LEB length");
        wasm.push(payload.len() as u8);
        wasm.extend(payload);
        wasm
    }

    #[test]
    fn reads_the_section() {
        let json = br#"{"files":[{"guest":"/d","mode":"ro"}],"env":["A"],"network":["*.example.org"],"max_memory_mb":8}"#;
        let manifest = read(&module_with(MANIFEST_SECTION, json)).unwrap().unwrap();
        assert_eq!(manifest.files[0].mode, Mode::ReadOnly);
        assert_eq!(manifest.env, ["A"]);
        assert_eq!(manifest.network[0].to_string(), "*.example.org");
        assert_eq!(manifest.max_memory_mb, Some(8));
        assert_eq!(manifest.deadline_ms, None);
    }

    #[test]
    fn no_section_is_no_manifest_and_a_bad_one_is_an_error() {
        assert_eq!(read(&module_with("other", b"x")).unwrap(), None);
        let error = read(&module_with(MANIFEST_SECTION, br#"{"fils":[]}"#)).unwrap_err();
        assert!(
            format!("{error:#}").contains("unknown field `fils`"),
            "{error:#}"
        );
        let error = read(&module_with(
            MANIFEST_SECTION,
            br#"{"files":[{"guest":"../x","mode":"ro"}]}"#,
        ))
        .unwrap_err();
        assert!(error.to_string().contains("not absolute"), "{error}");
    }
}
