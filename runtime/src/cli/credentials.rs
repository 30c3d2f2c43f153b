//! `moat credentials`: the callers' consented tokens in the credential store of a moat.toml
//! (its file, or under `[cluster]` its Redis), listed (never shown) and revoked. A running moat
//! reads them again on each call's need, so a revoked caller is asked to consent again on their
//! next call.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Result, bail};
use moat::cluster::Cluster;
use moat::cluster::consents::SharedConsents;
use moat::serve::config;
use moat::shared::consents::{File, Keeping, Seal, Store};

/// Where `config` keeps callers' tokens, by the same keeping the moat serving it uses, and its
/// name for the operator.
fn kept(config: &Path, secrets: Option<&Path>) -> Result<(Box<dyn Keeping>, String)> {
    let service = config::read_service(config, secrets)?;
    let Some(store) = service.credential_store else {
        bail!(
            "{} names no credential_store: consented tokens live in the memory of the moat \
             that holds them (restart it to drop them all)",
            config.display()
        );
    };
    match (service.cluster, store.path) {
        (Some(cluster), _) => {
            let name = format!("Redis at {}", moat::cluster::redacted(&cluster.redis));
            let shared = SharedConsents::new(Cluster::connect(&cluster)?, Seal::new(&store.key)?);
            Ok((Box::new(shared), name))
        }
        (None, Some(path)) => {
            let name = path.display().to_string();
            Ok((Box::new(File::open(Store::new(&path, &store.key)?)?), name))
        }
        (None, None) => bail!("credential_store names no path"),
    }
}

/// Prints each principal's sources, or only `principal`'s.
pub async fn list(
    config: &Path,
    secrets: Option<&Path>,
    principal: Option<&str>,
) -> Result<ExitCode> {
    let (kept, name) = kept(config, secrets)?;
    let mut entries = kept.all().await?;
    entries.retain(|e| principal.is_none_or(|p| e.principal == p));
    entries.sort_by(|a, b| (&a.principal, &a.source).cmp(&(&b.principal, &b.source)));
    if entries.is_empty() {
        println!("no consented credentials in {name}");
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
pub async fn revoke(
    config: &Path,
    secrets: Option<&Path>,
    principal: &str,
    source: &str,
) -> Result<ExitCode> {
    let (kept, name) = kept(config, secrets)?;
    if !kept.forget(source, principal).await? {
        bail!("{name} holds no credential of principal \"{principal}\" from \"{source}\"");
    }
    println!(
        "revoked: principal \"{principal}\" is asked to connect \"{source}\" again on its next call"
    );
    Ok(ExitCode::SUCCESS)
}
