//! The build-script half of the SDK: call [`prepare`] from a plugin's `build.rs`.

use std::path::{Path, PathBuf};
use std::{env, fs};

/// Error from [`prepare`]: what went wrong, with the file it concerns.
pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// Gets the plugin's WIT ready for [`generate!`](crate::generate):
///
/// 1. writes the `moat:plugin` package to `wit/deps/moat-plugin/plugin.wit`, so that the plugin's
///    WIT may `use` or `import` it (rewritten only when it differs, which keeps builds incremental);
/// 2. parses the crate's `wit/` package and encodes it, doc comments and all, into
///    `$OUT_DIR/moat-wit.bin` for [`embed_wit!`](crate::embed_wit);
/// 3. when the crate's `Cargo.toml` has a `[package.metadata.moat]` table, checks it and writes
///    it as the permission manifest, `$OUT_DIR/moat-manifest.json`, which
///    [`embed_wit!`](crate::embed_wit) embeds as the `moat:manifest` section.
pub fn prepare() -> Result<(), Error> {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR")?);
    let wit_dir = manifest_dir.join("wit");
    write_if_changed(
        &wit_dir.join("deps/moat-plugin/plugin.wit"),
        crate::PLUGIN_WIT.as_bytes(),
    )?;
    let encoded = encode_package(&wit_dir)?;
    write_if_changed(
        &PathBuf::from(env::var("OUT_DIR")?).join("moat-wit.bin"),
        &encoded,
    )?;
    println!("cargo:rerun-if-changed={}", wit_dir.display());

    let cargo_toml = manifest_dir.join("Cargo.toml");
    println!("cargo:rerun-if-changed={}", cargo_toml.display());
    println!("cargo::rustc-check-cfg=cfg(moat_manifest)");
    if let Some(manifest) = permission_manifest(&cargo_toml)? {
        write_if_changed(
            &PathBuf::from(env::var("OUT_DIR")?).join("moat-manifest.json"),
            manifest.as_bytes(),
        )?;
        println!("cargo:rustc-cfg=moat_manifest");
    }
    Ok(())
}

/// What a plugin asks for, as `[package.metadata.moat]` says it:
///
/// ```toml
/// [package.metadata.moat]
/// files = [{ guest = "/notes", mode = "rw" }]   # directories, at the guest path they are expected
/// env = ["NOTES_TITLE"]                          # environment variable names
/// config = ["api-url"]                           # wasi:config/store keys
/// network = ["https://api.example.org"]          # host patterns
/// max_memory_mb = 32
/// deadline_ms = 2000
/// ```
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Manifest {
    #[serde(default)]
    files: Vec<Dir>,
    #[serde(default)]
    env: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    config: Vec<String>,
    #[serde(default)]
    network: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_memory_mb: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    deadline_ms: Option<u64>,
}

#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Dir {
    guest: String,
    mode: Mode,
}

#[derive(serde::Serialize, serde::Deserialize)]
enum Mode {
    #[serde(rename = "ro")]
    ReadOnly,
    #[serde(rename = "rw")]
    ReadWrite,
}

/// The manifest's JSON, from `[package.metadata.moat]` of `cargo_toml`, if it has one.
fn permission_manifest(cargo_toml: &Path) -> Result<Option<String>, Error> {
    let text = fs::read_to_string(cargo_toml)
        .map_err(|e| format!("reading {}: {e}", cargo_toml.display()))?;
    let table: toml::Table = text.parse()?;
    let Some(moat) = table
        .get("package")
        .and_then(|p| p.get("metadata"))
        .and_then(|m| m.get("moat"))
    else {
        return Ok(None);
    };
    let manifest: Manifest = moat
        .clone()
        .try_into()
        .map_err(|e| format!("[package.metadata.moat] in {}: {e}", cargo_toml.display()))?;
    for dir in &manifest.files {
        if !dir.guest.starts_with('/') {
            return Err(format!(
                "[package.metadata.moat]: guest path \"{}\" must be absolute",
                dir.guest
            )
            .into());
        }
    }
    Ok(Some(serde_json::to_string(&manifest)?))
}

/// Encodes the WIT package in `dir` (with its `deps/`) as a binary WIT package.
pub fn encode_package(dir: &Path) -> Result<Vec<u8>, Error> {
    let mut resolve = wit_parser::Resolve::default();
    let (package, _files) = resolve
        .push_dir(dir)
        .map_err(|e| format!("reading WIT in {}: {e:#}", dir.display()))?;
    Ok(wit_component::encode(&resolve, package)?)
}

fn write_if_changed(path: &Path, contents: &[u8]) -> Result<(), Error> {
    if fs::read(path).is_ok_and(|old| old == contents) {
        return Ok(());
    }
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent)?;
    }
    fs::write(path, contents).map_err(|e| format!("writing {}: {e}", path.display()).into())
}
