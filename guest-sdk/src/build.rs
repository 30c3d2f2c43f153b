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
///    `$OUT_DIR/moat-wit.bin` for [`embed_wit!`](crate::embed_wit).
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
    Ok(())
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
