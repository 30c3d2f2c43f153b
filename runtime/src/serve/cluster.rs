//! `[cluster]`: the Redis through which replicas of moat behind one address share quotas and
//! sessions (see [`crate::cluster`]).
//!
//! ```toml
//! [cluster]
//! redis = "redis://:${secret:REDIS_PASSWORD}@redis.internal:6379/0"   # rediss:// for TLS
//! replica = "moat-1"                                                  # default: the host name
//! ```

use anyhow::{Context, Result, bail};
use schemars::JsonSchema;
use serde::Deserialize;

use crate::cluster::{Settings, host_name, redacted};

/// `[cluster]`: replicas of moat that share state.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ClusterEntry {
    /// The Redis (or Valkey) server the replicas share: `redis://[:PASSWORD@]HOST:PORT/DB`, or
    /// `rediss://` for TLS; `${secret:NAME}` anywhere in it takes a value (the password) from the
    /// secrets file.
    #[schemars(regex(pattern = r"^rediss?://"))]
    redis: String,
    /// This replica's name in audit lines, logs and metrics (`${env:NAME}` takes it from the
    /// environment). Default: the host name (a pod's name on Kubernetes).
    replica: Option<String>,
}

pub(super) fn parse(
    entry: ClusterEntry,
    expand: &dyn Fn(&str) -> Result<String>,
) -> Result<Settings> {
    let redis = expand(&entry.redis).context("[cluster] redis")?;
    if !(redis.starts_with("redis://") || redis.starts_with("rediss://")) {
        bail!(
            "[cluster] redis = \"{}\": give a redis:// URL, or rediss:// for TLS",
            redacted(&redis)
        );
    }
    let replica = entry
        .replica
        .map(|name| expand(&name))
        .transpose()
        .context("[cluster] replica")?;
    let replica = match replica {
        Some(name) if name.trim().is_empty() || name.chars().any(char::is_control) => {
            bail!("[cluster] replica must be a name: not empty, no control characters")
        }
        Some(name) => name,
        None => host_name(),
    };
    Ok(Settings { redis, replica })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<Settings> {
        let entry: ClusterEntry = toml::from_str(text)?;
        parse(entry, &|text| Ok(text.replace("${secret:P}", "hunter2")))
    }

    #[test]
    fn the_password_comes_from_the_secrets() {
        let settings = read(r#"redis = "redis://:${secret:P}@cache:6379/0""#).unwrap();
        assert_eq!(settings.redis, "redis://:hunter2@cache:6379/0");
        assert!(!settings.replica.is_empty());
        assert!(!format!("{settings:?}").contains("hunter2"));
    }

    #[test]
    fn refuses_what_is_not_redis() {
        let error = read(r#"redis = "http://cache:6379""#).unwrap_err();
        assert!(format!("{error:#}").contains("redis:// URL"), "{error:#}");
        let error = read("redis = \"redis://cache\"\nreplica = \" \"").unwrap_err();
        assert!(format!("{error:#}").contains("replica must be a name"));
        assert!(read("redis = \"redis://cache\"\nport = 1").is_err());
    }
}
