//! `moat credentials`: the callers' consented tokens in the credential store of a moat.toml,
//! listed (never shown) and revoked. A running moat reads the store again when it changes, so a
//! revoked caller is asked to consent again on their next call.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use moat::serve::config;
use moat::upstream::store::Store;

/// The store `config` names.
fn store(config: &Path, secrets: Option<&Path>) -> Result<Store> {
    let service = config::read_service(config, secrets)?;
    let Some((path, key)) = service.credential_store else {
        bail!(
            "{} names no credential_store: consented tokens live in the memory of the moat \
             that holds them (restart it to drop them all)",
            config.display()
        );
    };
    Store::new(&path, &key)
}

/// Prints each principal's sources, or only `principal`'s.
pub fn list(config: &Path, secrets: Option<&Path>, principal: Option<&str>) -> Result<ExitCode> {
    let store = store(config, secrets)?;
    let mut entries = store.load()?;
    entries.retain(|e| principal.is_none_or(|p| e.principal == p));
    entries.sort_by(|a, b| (&a.principal, &a.source).cmp(&(&b.principal, &b.source)));
    if entries.is_empty() {
        println!("no consented credentials in {}", store.path().display());
        return Ok(ExitCode::SUCCESS);
    }
    println!("PRINCIPAL\tSOURCE\tREFRESHABLE");
    for entry in entries {
        let refreshable = if entry.refresh.is_some() { "yes" } else { "no" };
        println!("{}\t{}\t{refreshable}", entry.principal, entry.source);
    }
    Ok(ExitCode::SUCCESS)
}

/// Drops `principal`'s tokens from `source`.
pub fn revoke(
    config: &Path,
    secrets: Option<&Path>,
    principal: &str,
    source: &str,
) -> Result<ExitCode> {
    let store = store(config, secrets)?;
    let mut entries = store.load()?;
    let before = entries.len();
    entries.retain(|e| !(e.principal == principal && e.source == source));
    if entries.len() == before {
        bail!(
            "{} holds no credential of principal \"{principal}\" from \"{source}\"",
            store.path().display()
        );
    }
    store
        .save(&entries)
        .context("writing the credential store")?;
    println!(
        "revoked: principal \"{principal}\" is asked to connect \"{source}\" again on its next call"
    );
    Ok(ExitCode::SUCCESS)
}
