//! `moat init`: a commented starter moat.toml, never written over an existing file.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};

pub fn init(path: &Path) -> Result<ExitCode> {
    let mut file = match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
    {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => bail!(
            "{} exists already; moat init writes only a new file (remove it, or name another)",
            path.display()
        ),
        Err(e) => return Err(e).with_context(|| format!("creating {}", path.display())),
    };
    file.write_all(moat::serve::config::STARTER.as_bytes())
        .with_context(|| format!("writing {}", path.display()))?;
    eprintln!(
        "moat: wrote {}; point [plugins.hello] at a component, then `moat serve --config {}`",
        path.display(),
        path.display()
    );
    Ok(ExitCode::SUCCESS)
}
