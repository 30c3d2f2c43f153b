//! Components in OCI registries, in the Wasm OCI artifact layout: one `application/wasm` layer
//! (the component) and an `application/vnd.wasm.config.v0+json` config describing it.
//!
//! Credentials come from `MOAT_REGISTRY_USER` and `MOAT_REGISTRY_PASSWORD` for the one registry
//! `MOAT_REGISTRY` names, else from the docker configuration (`$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`: an `auths` entry, or
//! a `credHelpers`/`credsStore` credential helper), else none. Registries on loopback hosts are
//! spoken to over plain HTTP, every other over HTTPS.

use std::collections::BTreeMap;
use std::fmt;

use anyhow::{Context, Result, anyhow, bail};
use base64::Engine as _;
use futures_util::StreamExt;
use oci_client::client::{ClientConfig, ClientProtocol, Config, ImageLayer};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::manifest::{OciDescriptor, OciImageManifest};
use oci_client::{Client, Reference};
use serde::Serialize;

use super::store::OciRecord;
use super::{Digest, Fetched, MAX_COMPONENT_BYTES, Progress, Store, check_component, is_loopback};

mod credentials;

use credentials::{Credentials, host_of};

/// How credentials are looked up in the environment.
type Env = dyn Fn(&str) -> Option<String> + Send + Sync;

/// The media type of the layer that holds the component.
pub const WASM_LAYER_MEDIA_TYPE: &str = "application/wasm";
/// The media type of the config that describes it.
pub const WASM_CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// The annotation of the component's layer that carries the publisher's detached minisign
/// signature (the signature file in base64: registries store manifests as canonical JSON, whose
/// strings keep line breaks raw), so that a signed artifact stays one manifest and one layer.
pub const SIGNATURE_ANNOTATION: &str = "dev.moat.signature.minisign";

/// An `oci://` source: a registry, a repository and a tag or a manifest digest.
#[derive(Clone, Debug)]
pub struct OciSource {
    reference: Reference,
    /// What the operator wrote after `oci://`, kept for messages and the lock file.
    text: String,
}

impl PartialEq for OciSource {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl Eq for OciSource {}

impl fmt::Display for OciSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "oci://{}", self.text)
    }
}

/// The signature file in a layer's annotation. One that is not base64 is handed on as it is,
/// for the policy to refuse as no signature.
fn decode_signature(encoded: &str) -> String {
    base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .unwrap_or_else(|| encoded.to_string())
}

/// What a push published.
#[derive(Debug)]
pub struct Pushed {
    /// The manifest's digest: `oci://host/repo@<this>` names exactly this artifact.
    pub manifest: String,
    /// The component's digest.
    pub digest: Digest,
}

impl OciSource {
    /// Parses `host[:port]/repo:tag` or `host[:port]/repo@sha256:…` (what follows `oci://`).
    pub fn parse(text: &str) -> Result<Self> {
        let reference: Reference = text
            .parse()
            .map_err(|e| anyhow!("oci://{text} is not a valid OCI reference: {e}"))?;
        Ok(Self {
            reference,
            text: text.to_string(),
        })
    }

    /// The last part of the repository (`acme/text-tools` → `text-tools`).
    pub fn name(&self) -> String {
        let repository = self.reference.repository();
        repository
            .rsplit('/')
            .next()
            .unwrap_or(repository)
            .to_string()
    }

    /// Whether the reference names a manifest digest (which cannot move) rather than a tag.
    pub fn is_digest(&self) -> bool {
        self.reference.digest().is_some()
    }

    /// This repository at a manifest digest: `oci://host/repo@sha256:…`.
    pub fn pinned(&self, manifest: &str) -> String {
        format!(
            "oci://{}/{}@{manifest}",
            self.reference.registry(),
            self.reference.repository()
        )
    }

    fn registry(&self) -> &str {
        self.reference.resolve_registry()
    }

    /// Pulls the component, checking the artifact's media types and the layer's digest. A
    /// component the store already holds is not downloaded again.
    pub(super) async fn pull(
        &self,
        store: Option<&Store>,
        progress: &Progress,
        env: &Env,
    ) -> Result<Fetched> {
        let (client, auth) = self.client(env)?;
        let (manifest, manifest_digest) = match client
            .pull_image_manifest(&self.reference, &auth.auth)
            .await
        {
            Ok(pulled) => pulled,
            Err(OciDistributionError::RequestError(e)) if e.is_connect() || e.is_timeout() => {
                return self.kept(store, &e);
            }
            Err(e) => return Err(self.explain(e, &auth)),
        };
        let layer = wasm_layer(&manifest).with_context(|| format!("{self}"))?;
        let digest: Digest = layer
            .digest
            .parse()
            .with_context(|| format!("{self}: the layer's digest"))?;
        let signature = layer
            .annotations
            .as_ref()
            .and_then(|a| a.get(SIGNATURE_ANNOTATION))
            .map(|encoded| decode_signature(encoded));
        let record = OciRecord {
            reference: self.text.clone(),
            manifest: manifest_digest.clone(),
            digest,
            signature: signature.clone(),
        };
        if let Some(store) = store
            && let Err(error) = store.put_oci_record(&record)
        {
            tracing::warn!("{self}: what the registry gave could not be kept: {error:#}");
        }
        if let Some(wasm) = store.and_then(|store| store.blob(&digest)) {
            return Ok(Fetched {
                wasm,
                digest,
                origin: format!("{self} (manifest {manifest_digest}; component kept from before)"),
                signature,
            });
        }
        if layer.size < 0 || layer.size as u64 > MAX_COMPONENT_BYTES {
            bail!(
                "{self}: a {} byte layer is more than the {MAX_COMPONENT_BYTES} bytes a plugin may have",
                layer.size
            );
        }

        let mut stream = client
            .pull_blob_stream(&self.reference, layer)
            .await
            .map_err(|e| self.explain(e, &auth))?;
        let bar = progress.download(&self.to_string(), Some(layer.size as u64));
        let mut wasm = Vec::with_capacity(layer.size as usize);
        let mut hasher = Digest::hasher();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.with_context(|| format!("{self}: the download broke off"))?;
            if (wasm.len() + chunk.len()) as u64 > layer.size as u64 {
                bail!("{self}: the layer is longer than its manifest says");
            }
            hasher.update(&chunk);
            wasm.extend_from_slice(&chunk);
            bar.inc(chunk.len() as u64);
        }
        bar.finish_and_clear();
        let actual = hasher.finish();
        if actual != digest {
            bail!("{self}: the layer's content has {actual}, its manifest says {digest}");
        }
        check_component(&wasm).with_context(|| format!("{self}"))?;
        if let Some(store) = store
            && let Err(error) = store.put_blob(&digest, &wasm)
        {
            tracing::warn!("{self}: the download could not be kept: {error:#}");
        }
        Ok(Fetched {
            wasm,
            digest,
            origin: format!("{self} (manifest {manifest_digest})"),
            signature,
        })
    }

    /// When the registry cannot be reached: the component (and signature) the last pull of this
    /// reference gave, if the store kept them, with a warning.
    fn kept(&self, store: Option<&Store>, error: &reqwest::Error) -> Result<Fetched> {
        let registry = self.registry();
        let kept = store.and_then(|store| {
            let record = store.oci_record(&self.text)?;
            Some((store.blob(&record.digest)?, record))
        });
        let Some((wasm, record)) = kept else {
            bail!("{self}: cannot reach the registry {registry}: {error}");
        };
        tracing::warn!(
            "{self}: cannot reach {registry} ({error}); using the copy pulled before, {}",
            record.digest
        );
        Ok(Fetched {
            wasm,
            digest: record.digest,
            origin: format!(
                "{self} (manifest {}; kept copy, the registry was unreachable)",
                record.manifest
            ),
            signature: record.signature,
        })
    }

    /// Publishes `wasm` as a Wasm OCI artifact under this reference's tag, its layer annotated
    /// with the publisher's `signature` if there is one.
    pub(super) async fn push(
        &self,
        wasm: &[u8],
        signature: Option<&str>,
        env: &Env,
    ) -> Result<Pushed> {
        check_component(wasm)?;
        if self.reference.digest().is_some() {
            bail!("{self}: push to a tag, not to a digest");
        }
        let digest = Digest::of(wasm);
        let config = WasmConfig::describe(wasm, &digest)?;
        let config = Config::new(
            serde_json::to_vec(&config)?,
            WASM_CONFIG_MEDIA_TYPE.to_string(),
            None,
        );
        let annotations = signature.map(|signature| {
            let encoded = base64::engine::general_purpose::STANDARD.encode(signature);
            BTreeMap::from([(SIGNATURE_ANNOTATION.to_string(), encoded)])
        });
        let layers = [ImageLayer::new(
            wasm.to_vec(),
            WASM_LAYER_MEDIA_TYPE.to_string(),
            annotations,
        )];
        let manifest = OciImageManifest::build(&layers, &config, None);
        let (client, auth) = self.client(env)?;
        client
            .push(&self.reference, &layers, config, &auth.auth, Some(manifest))
            .await
            .map_err(|e| self.explain(e, &auth))?;
        let manifest = client
            .fetch_manifest_digest(&self.reference, &auth.auth)
            .await
            .map_err(|e| self.explain(e, &auth))?;
        Ok(Pushed { manifest, digest })
    }

    fn client(&self, env: &Env) -> Result<(Client, Credentials)> {
        super::install_tls_provider();
        let registry = self.registry().to_string();
        let protocol = if is_loopback(host_of(&registry)) {
            ClientProtocol::HttpsExcept(vec![registry.clone()])
        } else {
            ClientProtocol::Https
        };
        let client = Client::try_from(ClientConfig {
            protocol,
            // A Wasm artifact is one manifest; an index is someone else's image.
            platform_resolver: None,
            connect_timeout: Some(std::time::Duration::from_secs(30)),
            user_agent: concat!("moat/", env!("CARGO_PKG_VERSION")),
            ..Default::default()
        })
        .context("setting up the OCI client")?;
        Ok((client, Credentials::for_registry(&registry, env)?))
    }

    /// Turns a registry error into a sentence that says what went wrong and what to check.
    fn explain(&self, error: OciDistributionError, auth: &Credentials) -> anyhow::Error {
        let registry = self.registry();
        let denied = || {
            anyhow!(
                "{self}: access denied by {registry} ({}); set MOAT_REGISTRY={registry} with \
                 MOAT_REGISTRY_USER and MOAT_REGISTRY_PASSWORD, or log in with docker",
                auth.whence
            )
        };
        match error {
            OciDistributionError::UnauthorizedError { .. }
            | OciDistributionError::AuthenticationFailure(_) => denied(),
            OciDistributionError::RegistryError { envelope, .. } => {
                let has = |code: OciErrorCode| envelope.errors.iter().any(|e| e.code == code);
                if has(OciErrorCode::Unauthorized) || has(OciErrorCode::Denied) {
                    denied()
                } else if has(OciErrorCode::ManifestUnknown)
                    || has(OciErrorCode::NameUnknown)
                    || has(OciErrorCode::NotFound)
                    || has(OciErrorCode::BlobUnknown)
                {
                    anyhow!("{self}: not found in {registry} (no such repository, tag or digest)")
                } else {
                    let messages: Vec<String> = envelope
                        .errors
                        .iter()
                        .map(|e| format!("{:?}: {}", e.code, e.message))
                        .collect();
                    anyhow!("{self}: {registry} refused: {}", messages.join("; "))
                }
            }
            OciDistributionError::ImageManifestNotFoundError(_) => {
                anyhow!("{self}: not found in {registry} (no such repository, tag or digest)")
            }
            OciDistributionError::ServerError { code: 404, .. } => {
                anyhow!("{self}: not found in {registry} (HTTP 404)")
            }
            OciDistributionError::ServerError {
                code: 401 | 403, ..
            } => denied(),
            OciDistributionError::ImageIndexParsingNoPlatformResolverError => anyhow!(
                "{self}: an image index (a multi-platform image), not a Wasm component artifact"
            ),
            OciDistributionError::RequestError(e) if e.is_connect() || e.is_timeout() => {
                anyhow!("{self}: cannot reach the registry {registry}: {e}")
            }
            other => anyhow::Error::new(other).context(format!("{self}: talking to {registry}")),
        }
    }
}

/// The one `application/wasm` layer of a Wasm artifact, or why the manifest is not one.
fn wasm_layer(manifest: &OciImageManifest) -> Result<&OciDescriptor> {
    let config = &manifest.config.media_type;
    if config != WASM_CONFIG_MEDIA_TYPE {
        bail!(
            "not a Wasm component artifact: its config has media type \"{config}\" (expected \
             \"{WASM_CONFIG_MEDIA_TYPE}\")"
        );
    }
    match manifest.layers.as_slice() {
        [layer] if layer.media_type == WASM_LAYER_MEDIA_TYPE => Ok(layer),
        layers => {
            let types: Vec<&str> = layers.iter().map(|l| l.media_type.as_str()).collect();
            bail!(
                "not a Wasm component artifact: its layers have media types {types:?} (expected \
                 exactly one \"{WASM_LAYER_MEDIA_TYPE}\")"
            )
        }
    }
}

/// The Wasm OCI artifact config.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WasmConfig {
    created: String,
    architecture: &'static str,
    os: &'static str,
    layer_digests: Vec<String>,
    component: ComponentInfo,
}

#[derive(Serialize)]
struct ComponentInfo {
    exports: Vec<String>,
    imports: Vec<String>,
}

impl WasmConfig {
    fn describe(wasm: &[u8], digest: &Digest) -> Result<Self> {
        use wit_parser::decoding::DecodedWasm;
        let DecodedWasm::Component(resolve, world) =
            crate::wit::docs::decode_untrusted(wasm).context("reading the component's type")?
        else {
            bail!("a WIT package, not a component");
        };
        let world = &resolve.worlds[world];
        let names = |items: &wit_parser::IndexMap<wit_parser::WorldKey, wit_parser::WorldItem>| {
            items
                .keys()
                .map(|key| resolve.name_world_key(key))
                .collect::<Vec<_>>()
        };
        Ok(Self {
            created: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            architecture: "wasm",
            os: "wasip2",
            layer_digests: vec![digest.to_string()],
            component: ComponentInfo {
                exports: names(&world.exports),
                imports: names(&world.imports),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use oci_client::secrets::RegistryAuth;

    use super::credentials::DockerConfig;
    use super::*;

    #[test]
    fn finds_credentials_in_a_docker_config() {
        let config: DockerConfig = serde_json::from_str(
            r#"{"auths": {
                "127.0.0.1:5000": {"auth": "YWxpY2U6czNjcmV0"},
                "https://index.docker.io/v1/": {"username": "bob", "password": "pw"}
            }}"#,
        )
        .unwrap();
        assert_eq!(
            config.credentials("127.0.0.1:5000").unwrap(),
            Some(("alice".into(), "s3cret".into()))
        );
        assert_eq!(
            config.credentials("index.docker.io").unwrap(),
            Some(("bob".into(), "pw".into()))
        );
        assert_eq!(config.credentials("127.0.0.1:5001").unwrap(), None);

        let with_helper: DockerConfig =
            serde_json::from_str(r#"{"credsStore": "moat-test-no-such-helper"}"#).unwrap();
        assert_eq!(with_helper.credentials("ghcr.io").unwrap(), None);
    }

    fn env_of(pairs: &[(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        let pairs = pairs.to_vec();
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn environment_credentials_go_only_to_their_registry() {
        let env = env_of(&[
            ("MOAT_REGISTRY", "GHCR.io"),
            ("MOAT_REGISTRY_USER", "alice"),
            ("MOAT_REGISTRY_PASSWORD", "secret"),
        ]);
        let mine = Credentials::for_registry("ghcr.io", &env).unwrap();
        assert_eq!(
            mine.auth,
            RegistryAuth::Basic("alice".into(), "secret".into())
        );
        assert!(
            mine.whence.contains("from MOAT_REGISTRY_USER"),
            "{}",
            mine.whence
        );
        for other in ["registry.example.com", "ghcr.io:5000", "127.0.0.1:5000"] {
            let theirs = Credentials::for_registry(other, &env).unwrap();
            assert_eq!(theirs.auth, RegistryAuth::Anonymous, "{other}");
        }

        let docker_hub = env_of(&[
            ("MOAT_REGISTRY", "index.docker.io"),
            ("MOAT_REGISTRY_USER", "bob"),
            ("MOAT_REGISTRY_PASSWORD", "pw"),
        ]);
        let hub = Credentials::for_registry("docker.io", &docker_hub).unwrap();
        assert_eq!(hub.auth, RegistryAuth::Basic("bob".into(), "pw".into()));
    }

    #[test]
    fn environment_credentials_without_their_registry_are_refused() {
        let unscoped = env_of(&[
            ("MOAT_REGISTRY_USER", "alice"),
            ("MOAT_REGISTRY_PASSWORD", "secret"),
        ]);
        let error = Credentials::for_registry("ghcr.io", &unscoped)
            .err()
            .unwrap()
            .to_string();
        assert!(error.contains("MOAT_REGISTRY=host[:port]"), "{error}");
        let with_path = env_of(&[
            ("MOAT_REGISTRY", "https://ghcr.io/acme"),
            ("MOAT_REGISTRY_USER", "alice"),
            ("MOAT_REGISTRY_PASSWORD", "secret"),
        ]);
        assert!(Credentials::for_registry("ghcr.io", &with_path).is_err());
        let no_password = env_of(&[("MOAT_REGISTRY", "ghcr.io"), ("MOAT_REGISTRY_USER", "a")]);
        assert!(Credentials::for_registry("ghcr.io", &no_password).is_err());
        let anonymous = Credentials::for_registry("ghcr.io", &env_of(&[])).unwrap();
        assert_eq!(anonymous.auth, RegistryAuth::Anonymous);
    }

    #[test]
    fn registry_hosts() {
        assert_eq!(host_of("127.0.0.1:5000"), "127.0.0.1");
        assert_eq!(host_of("[::1]:5000"), "::1");
        assert_eq!(host_of("ghcr.io"), "ghcr.io");
        let source = OciSource::parse("127.0.0.1:5000/acme/text-tools:1").unwrap();
        assert_eq!(source.registry(), "127.0.0.1:5000");
        assert_eq!(source.name(), "text-tools");
    }
}
