//! `moat keygen`: a minisign key pair for `moat sign`, made by moat itself (no second tool).

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use minisign::KeyPair;

/// Writes `PREFIX.key` (0600) and `PREFIX.pub`; never over existing files.
pub fn keygen(prefix: &Path, no_password: bool) -> Result<ExitCode> {
    let with_extension = |ext: &str| -> PathBuf {
        let mut path = prefix.as_os_str().to_owned();
        path.push(ext);
        path.into()
    };
    let (secret_path, public_path) = (with_extension(".key"), with_extension(".pub"));
    for path in [&secret_path, &public_path] {
        if path.exists() {
            bail!("{} exists already; choose another PREFIX", path.display());
        }
    }
    let password = std::env::var("MOAT_SIGN_PASSWORD").ok();
    let pair = match (password, no_password) {
        (Some(_), true) => bail!("MOAT_SIGN_PASSWORD is set and --no-password given: choose one"),
        (None, true) => KeyPair::generate_unencrypted_keypair(),
        (Some(password), false) => KeyPair::generate_encrypted_keypair(Some(password)),
        // The crate asks for the password on the terminal.
        (None, false) if std::io::IsTerminal::is_terminal(&std::io::stdin()) => {
            KeyPair::generate_encrypted_keypair(None)
        }
        (None, false) => bail!(
            "no password for the secret key: set MOAT_SIGN_PASSWORD, or pass --no-password to \
             leave it unencrypted"
        ),
    }
    .map_err(|e| anyhow::anyhow!("{e}"))
    .context("making the key pair")?;
    let secret = pair
        .sk
        .to_box(None)
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .into_string();
    let public = pair
        .pk
        .to_box()
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .into_string();
    write_new(&secret_path, &secret, 0o600)?;
    write_new(&public_path, &public, 0o644)?;
    eprintln!(
        "moat: wrote the secret key {} (keep it private) and the public key {} (give it to \
         those who verify: `moat verify --key`, a policy's [publishers])",
        secret_path.display(),
        public_path.display()
    );
    Ok(ExitCode::SUCCESS)
}

fn write_new(path: &Path, text: &str, mode: u32) -> Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    file.write_all(text.as_bytes())
        .with_context(|| format!("writing {}", path.display()))
}
