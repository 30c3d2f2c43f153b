//! componentize-py for `moat build`: the one on `PATH` if there is one, else the pinned version in
//! a virtualenv of moat's own in its cache folder, made on first use (Python 3 is all it needs),
//! as `moat build` runs `npm install` for a JavaScript project.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use super::toolchains::install_beside;

/// The componentize-py moat's Python guest SDK is built and tested with.
pub const VERSION: &str = "0.25.1";

/// componentize-py's entry point, run by the virtualenv's Python: its `bin/componentize-py`
/// script names the folder the virtualenv was made in, which is not where it ends up.
const LAUNCH: &str = "import sys; from componentize_py import script; \
                      sys.argv[0] = 'componentize-py'; sys.exit(script())";

/// A command that runs componentize-py, to give its arguments to.
pub fn componentize_py() -> Result<Command> {
    if let Some(on_path) = on_path("componentize-py") {
        return Ok(Command::new(on_path));
    }
    let venv = super::cache::dir()?
        .join("toolchains")
        .join(format!("componentize-py-{VERSION}"));
    if !is_complete(&venv) {
        install(&venv)?;
    }
    let mut command = Command::new(venv.join("bin").join("python"));
    command.args(["-c", LAUNCH]);
    Ok(command)
}

fn is_complete(venv: &Path) -> bool {
    venv.join("bin").join("python").exists()
        && std::fs::read_dir(venv.join("lib")).is_ok_and(|mut pythons| {
            pythons.any(|python| {
                python.is_ok_and(|p| p.path().join("site-packages/componentize_py").is_dir())
            })
        })
}

/// Makes the virtualenv `venv` with componentize-py in it (see [`install_beside`]).
fn install(venv: &Path) -> Result<()> {
    eprintln!(
        "moat: componentize-py is not on PATH: installing componentize-py {VERSION} from PyPI \
         (about 40 MB) into {}, which later builds reuse",
        venv.display()
    );
    install_beside(venv, make_venv, is_complete)
}

/// A virtualenv in `folder` with componentize-py installed.
fn make_venv(folder: &Path) -> Result<()> {
    let made = Command::new("python3")
        .args(["-m", "venv"])
        .arg(folder)
        .status()
        .context("running python3: install Python 3 (or componentize-py itself)")?;
    if !made.success() {
        bail!(
            "python3 -m venv failed ({made}); on Debian and Ubuntu the venv module is the \
             python3-venv package"
        );
    }
    let pip = Command::new(folder.join("bin").join("python"))
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ])
        .arg(format!("componentize-py=={VERSION}"))
        .status()
        .context("running pip in the new virtualenv")?;
    if !pip.success() {
        bail!("pip could not install componentize-py {VERSION} ({pip}): is PyPI reachable?");
    }
    Ok(())
}

/// `program` in a folder of `PATH`.
fn on_path(program: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}
