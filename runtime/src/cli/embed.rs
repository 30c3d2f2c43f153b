//! `moat embed`: a component built by any toolchain given the WIT docs and permission manifest
//! the Rust guest SDK embeds (see [`moat::supply::embed`]).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};

use moat::supply::embed::{embed, encode_wit, read_manifest};
use moat::wit::docs::PluginDocs;
use moat::wit::world::World;

/// Embeds the WIT in `wit` and the manifest in `manifest` (a `moat-plugin.toml`, `package.json`,
/// `pyproject.toml` or `Cargo.toml`) into `component`, written to `out` (the component itself
/// when `None`). Says how many exports the docs describe.
pub fn run(
    component: &Path,
    wit: &Path,
    manifest: Option<&Path>,
    out: Option<&Path>,
) -> Result<ExitCode> {
    let wasm =
        std::fs::read(component).with_context(|| format!("reading {}", component.display()))?;
    let encoded = encode_wit(wit)?;
    let manifest = match manifest {
        Some(path) => Some(
            read_manifest(path)?
                .with_context(|| format!("{} holds no permission manifest", path.display()))?,
        ),
        None => None,
    };
    let embedded = embed(&wasm, &encoded, manifest.as_ref())?;
    let docs = PluginDocs::from_component(&embedded)?.context("the docs did not embed")?;
    let world = World::of(&embedded)?;
    let described = world
        .exports
        .iter()
        .filter(|export| docs.function(None, export).is_some() || docs.has_interface(export))
        .count();
    if described == 0 && !world.exports.is_empty() {
        bail!(
            "the WIT in {} describes none of the component's exports ({}); is it the WIT the \
             component was built from?",
            wit.display(),
            world.exports.join(", ")
        );
    }
    let out: PathBuf = out.unwrap_or(component).to_path_buf();
    let partial = out.with_extension("wasm.partial");
    std::fs::write(&partial, &embedded)
        .with_context(|| format!("writing {}", partial.display()))?;
    std::fs::rename(&partial, &out).with_context(|| format!("writing {}", out.display()))?;
    let manifest_note = if manifest.is_some() {
        " and its permission manifest"
    } else {
        ""
    };
    eprintln!(
        "moat: {} now carries the docs of {described} of its {} exports{manifest_note}",
        out.display(),
        world.exports.len()
    );
    Ok(ExitCode::SUCCESS)
}
