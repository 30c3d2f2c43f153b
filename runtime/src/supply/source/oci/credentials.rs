//! Who moat is to a registry: `MOAT_REGISTRY_USER` and `MOAT_REGISTRY_PASSWORD` for the one
//! registry `MOAT_REGISTRY` names, else the docker configuration (an `auths` entry, or a
//! credential helper), else nobody.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use base64::Engine as _;
use oci_client::secrets::RegistryAuth;

use super::Env;

/// Registry credentials and, for messages, where they came from.
pub(super) struct Credentials {
    pub(super) auth: RegistryAuth,
    pub(super) whence: String,
}

impl Credentials {
    /// The credentials for `registry` (`host[:port]`): `MOAT_REGISTRY_USER` and
    /// `MOAT_REGISTRY_PASSWORD` when `MOAT_REGISTRY` names this registry, else its docker
    /// configuration entry, else none. Those variables without `MOAT_REGISTRY` are refused: sent
    /// to whatever registry a source names, they would go to any of them.
    pub(super) fn for_registry(registry: &str, env: &Env) -> Result<Self> {
        if let Some((scope, user, password)) = environment_credentials(env)?
            && registry_key(&scope).eq_ignore_ascii_case(registry_key(registry))
        {
            return Ok(Self {
                whence: format!("user \"{user}\" from MOAT_REGISTRY_USER, for {scope}"),
                auth: RegistryAuth::Basic(user, password),
            });
        }
        let Some(path) = docker_config_path(env) else {
            return Ok(Self::anonymous());
        };
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::anonymous()),
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        let config: DockerConfig = serde_json::from_str(&text)
            .with_context(|| format!("{} is not a docker configuration", path.display()))?;
        let found = config
            .credentials(registry)
            .with_context(|| format!("the credentials for {registry} in {}", path.display()))?;
        Ok(match found {
            Some((user, password)) => Self {
                whence: format!("user \"{user}\" from {}", path.display()),
                auth: RegistryAuth::Basic(user, password),
            },
            None => Self::anonymous(),
        })
    }

    pub(super) fn anonymous() -> Self {
        Self {
            auth: RegistryAuth::Anonymous,
            whence: "no credentials given".into(),
        }
    }
}

/// `MOAT_REGISTRY`, `MOAT_REGISTRY_USER` and `MOAT_REGISTRY_PASSWORD`, all three or none.
fn environment_credentials(env: &Env) -> Result<Option<(String, String, String)>> {
    let scope = env("MOAT_REGISTRY").filter(|s| !s.trim().is_empty());
    let user = env("MOAT_REGISTRY_USER");
    let password = env("MOAT_REGISTRY_PASSWORD");
    match (scope, user, password) {
        (None, None, None) => Ok(None),
        (Some(scope), Some(user), Some(password)) => {
            let scope = scope.trim().to_string();
            if scope.contains('/') || scope.contains("://") {
                bail!(
                    "MOAT_REGISTRY=\"{scope}\" is not a registry: write host[:port], as in \
                     MOAT_REGISTRY=ghcr.io or MOAT_REGISTRY=127.0.0.1:5000"
                );
            }
            Ok(Some((scope, user, password)))
        }
        (None, _, _) => bail!(
            "MOAT_REGISTRY_USER/MOAT_REGISTRY_PASSWORD are set but MOAT_REGISTRY is not: set \
             MOAT_REGISTRY=host[:port] to the registry they are for (e.g. MOAT_REGISTRY=ghcr.io); \
             other registries get none of them"
        ),
        (Some(_), None, _) => bail!("MOAT_REGISTRY is set but MOAT_REGISTRY_USER is not"),
        (Some(_), Some(_), None) => {
            bail!("MOAT_REGISTRY_USER is set but MOAT_REGISTRY_PASSWORD is not")
        }
    }
}

fn docker_config_path(env: &Env) -> Option<PathBuf> {
    let dir = match env("DOCKER_CONFIG") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env("HOME")?).join(".docker"),
    };
    Some(dir.join("config.json"))
}

/// The parts of docker's `config.json` that hold registry credentials.
#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub(super) struct DockerConfig {
    #[serde(default)]
    auths: BTreeMap<String, DockerAuth>,
    #[serde(default)]
    cred_helpers: BTreeMap<String, String>,
    creds_store: Option<String>,
}

#[derive(serde::Deserialize, Default)]
struct DockerAuth {
    /// base64 of `user:password`.
    auth: Option<String>,
    username: Option<String>,
    password: Option<String>,
}

impl DockerConfig {
    /// The user and password for `registry`: its `auths` entry (keys may carry a scheme and a
    /// path, as `https://index.docker.io/v1/` does), else its credential helper.
    pub(super) fn credentials(&self, registry: &str) -> Result<Option<(String, String)>> {
        let wanted = registry_key(registry);
        let entry = self
            .auths
            .iter()
            .find(|(key, _)| registry_key(key) == wanted)
            .map(|(_, entry)| entry);
        if let Some(entry) = entry {
            if let (Some(user), Some(password)) = (&entry.username, &entry.password) {
                return Ok(Some((user.clone(), password.clone())));
            }
            if let Some(auth) = &entry.auth {
                let decoded = base64::engine::general_purpose::STANDARD
                    .decode(auth.trim())
                    .context("`auth` is not base64")?;
                let decoded = String::from_utf8(decoded).context("`auth` is not UTF-8")?;
                let (user, password) = decoded
                    .split_once(':')
                    .context("`auth` is not base64 of user:password")?;
                return Ok(Some((user.to_string(), password.to_string())));
            }
        }
        let Some(helper) = self
            .cred_helpers
            .get(registry)
            .or(self.creds_store.as_ref())
        else {
            return Ok(None);
        };
        // As docker does: a helper that is missing or knows no credentials means anonymous.
        match credential_helper(helper, registry) {
            Ok(found) => Ok(Some(found)),
            Err(error) => {
                tracing::debug!("no credentials for {registry} from a helper: {error:#}");
                Ok(None)
            }
        }
    }
}

/// A registry name as docker's `auths` keys spell it, without scheme or path; Docker Hub under
/// the one name.
fn registry_key(key: &str) -> &str {
    let key = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    let key = key.split('/').next().unwrap_or(key);
    match key {
        "docker.io" | "index.docker.io" | "registry-1.docker.io" => "docker.io",
        other => other,
    }
}

/// Asks `docker-credential-<helper>` for the credentials of `registry` (docker's protocol: the
/// server on stdin, `{"Username", "Secret"}` on stdout).
fn credential_helper(helper: &str, registry: &str) -> Result<(String, String)> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let program = format!("docker-credential-{helper}");
    let mut child = Command::new(&program)
        .arg("get")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("running {program}"))?;
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(registry.as_bytes())?;
    let output = child.wait_with_output()?;
    if !output.status.success() {
        bail!(
            "{program} get: {}",
            String::from_utf8_lossy(&output.stdout).trim()
        );
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct HelperAnswer {
        username: String,
        secret: String,
    }
    let answer: HelperAnswer =
        serde_json::from_slice(&output.stdout).with_context(|| format!("{program}'s answer"))?;
    Ok((answer.username, answer.secret))
}

/// `host` of `host:port` or `[v6]:port`.
pub(super) fn host_of(registry: &str) -> &str {
    if let Some(rest) = registry.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    registry.split(':').next().unwrap_or(registry)
}
