//! `moat credentials`: the callers' consented tokens in the credential store of a moat.toml
//! (its file, or under `[cluster]` its Redis), listed (never shown) and revoked. A running moat
//! reads them again on each call's need, so a revoked caller is asked to consent again on their
//! next call.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use moat::serve::config;
use moat::upstream::shared as consents;
use moat::upstream::store::{Entry, Seal, Store};

/// Where `config` keeps callers' tokens.
enum Kept {
    File(Store),
    Redis {
        client: redis::Client,
        seal: Seal,
        address: String,
    },
}

impl Kept {
    fn of(config: &Path, secrets: Option<&Path>) -> Result<Self> {
        let service = config::read_service(config, secrets)?;
        let Some(store) = service.credential_store else {
            bail!(
                "{} names no credential_store: consented tokens live in the memory of the moat \
                 that holds them (restart it to drop them all)",
                config.display()
            );
        };
        match (service.cluster, store.path) {
            (Some(cluster), _) => Ok(Self::Redis {
                client: redis::Client::open(cluster.redis.as_str())
                    .context("[cluster] redis is not a Redis URL")?,
                seal: Seal::new(&store.key)?,
                address: moat::cluster::redacted(&cluster.redis),
            }),
            (None, Some(path)) => Ok(Self::File(Store::new(&path, &store.key)?)),
            (None, None) => bail!("credential_store names no path"),
        }
    }

    fn name(&self) -> String {
        match self {
            Self::File(store) => store.path().display().to_string(),
            Self::Redis { address, .. } => format!("Redis at {address}"),
        }
    }

    async fn connection(client: &redis::Client) -> Result<redis::aio::MultiplexedConnection> {
        client
            .get_multiplexed_async_connection()
            .await
            .context("connecting to the cluster's Redis")
    }

    async fn entries(&self) -> Result<Vec<Entry>> {
        match self {
            Self::File(store) => store.load(),
            Self::Redis { client, seal, .. } => {
                let connection = Self::connection(client).await?;
                Ok(consents::all(connection, seal).await?)
            }
        }
    }

    /// Drops `principal`'s tokens from `source`: whether there were any.
    async fn revoke(&self, principal: &str, source: &str) -> Result<bool> {
        match self {
            Self::File(store) => {
                let mut entries = store.load()?;
                let before = entries.len();
                entries.retain(|e| !(e.principal == principal && e.source == source));
                if entries.len() == before {
                    return Ok(false);
                }
                store
                    .save(&entries)
                    .context("writing the credential store")?;
                Ok(true)
            }
            Self::Redis { client, .. } => {
                let connection = Self::connection(client).await?;
                let key = consents::token_key(source, principal);
                Ok(consents::delete(connection, key).await?)
            }
        }
    }
}

/// Prints each principal's sources, or only `principal`'s.
pub async fn list(
    config: &Path,
    secrets: Option<&Path>,
    principal: Option<&str>,
) -> Result<ExitCode> {
    let kept = Kept::of(config, secrets)?;
    let mut entries = kept.entries().await?;
    entries.retain(|e| principal.is_none_or(|p| e.principal == p));
    entries.sort_by(|a, b| (&a.principal, &a.source).cmp(&(&b.principal, &b.source)));
    if entries.is_empty() {
        println!("no consented credentials in {}", kept.name());
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
    let kept = Kept::of(config, secrets)?;
    if !kept.revoke(principal, source).await? {
        bail!(
            "{} holds no credential of principal \"{principal}\" from \"{source}\"",
            kept.name()
        );
    }
    println!(
        "revoked: principal \"{principal}\" is asked to connect \"{source}\" again on its next call"
    );
    Ok(ExitCode::SUCCESS)
}
