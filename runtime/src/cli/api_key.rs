//! `moat auth key NAME`: a new API key for `moat serve --http`.

use std::process::ExitCode;

use anyhow::Result;

use super::print_out;

/// Prints a new key for the client, and its hash for moat.toml's `[auth] api_keys`.
pub fn make(name: &str) -> Result<ExitCode> {
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
    {
        anyhow::bail!("a key's name may hold only ASCII letters, digits, `_`, `.` and `-`");
    }
    let key = moat::access::credentials::generate()?;
    print_out(&key);
    eprintln!(
        "moat: give the client the key above (`Authorization: Bearer KEY`); put its hash \
         in moat.toml:\n\n[auth.api_keys]\n{name} = \"{}\"",
        moat::access::credentials::hashed(&key)
    );
    Ok(ExitCode::SUCCESS)
}
