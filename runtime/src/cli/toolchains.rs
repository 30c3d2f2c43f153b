//! What `moat build`'s toolchains share: a toolchain installed into moat's cache folder is made
//! beside its place and renamed into it, and a JavaScript project's packages come from
//! `npm install`.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

/// Makes `folder` by running `make` on a folder beside it, then renames that into place, so
/// that a build interrupted (or two at once) never leaves a half-made toolchain to use.
/// `complete` says whether a folder is a whole toolchain (another build's, made meanwhile).
pub fn install_beside(
    folder: &Path,
    make: impl FnOnce(&Path) -> Result<()>,
    complete: impl Fn(&Path) -> bool,
) -> Result<()> {
    let parent = folder.parent().expect("a folder in the cache");
    std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    let name = folder.file_name().unwrap_or_default().to_string_lossy();
    let partial = parent.join(format!(".{name}.{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&partial);
    if let Err(error) = make(&partial) {
        let _ = std::fs::remove_dir_all(&partial);
        return Err(error);
    }
    match std::fs::rename(&partial, folder) {
        Ok(()) => Ok(()),
        // Another build made it meanwhile: theirs is as good.
        Err(_) if complete(folder) => {
            let _ = std::fs::remove_dir_all(&partial);
            Ok(())
        }
        Err(error) => Err(error).with_context(|| format!("moving it to {}", folder.display())),
    }
}

/// `npm install` in `dir`, its output on stderr (moat's stdout is for results); `quiet` for
/// moat's own toolchains, whose peer-dependency notes are no concern of the user's.
pub fn npm_install(dir: &Path, quiet: bool) -> Result<()> {
    let status = Command::new("npm")
        .args(["install", "--no-audit", "--no-fund"])
        .args(quiet.then_some("--loglevel=error"))
        .stdout(std::io::stderr())
        .current_dir(dir)
        .status()
        .context("running npm: install Node.js, which comes with npm")?;
    if !status.success() {
        bail!("npm install failed in {} ({status})", dir.display());
    }
    Ok(())
}
