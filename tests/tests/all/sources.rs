//! Plugin sources against real servers on loopback: Debian's `docker-registry` (the CNCF
//! distribution registry) for `oci://`, an HTTP server for URLs; and the lock that pins them.

use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use base64::Engine as _;
use moat::plugin::registry::Registry;
use moat::supply::PluginSource;
use moat::supply::lock::Lock;
use moat::supply::policy::Policy;
use moat::supply::source::{Digest, Fetched, Fetcher, OciSource, Progress, Source, Store};
use moat_tests::{TempDir, call, engine, plugins, text};

use crate::trust;
use serde_json::json;

const ECHO: &str = plugins::ECHO;
const TEXT: &str = plugins::TEXT;

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A `docker-registry` on a free loopback port with its own storage, stopped when dropped.
struct TestRegistry {
    child: Child,
    host: String,
    /// The configuration and storage, removed after the registry stops.
    _dir: TempDir,
}

impl TestRegistry {
    /// Starts a registry; with `user`, only that user (password `secret`) may pull or push.
    fn start(name: &str, user: Option<&str>) -> Self {
        let dir = TempDir::new(&format!("registry-{name}"));
        let port = free_port();
        let mut config = format!(
            "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\n\
             storage:\n  filesystem:\n    rootdirectory: {}\n\
             http:\n  addr: 127.0.0.1:{port}\n",
            dir.join("data").display()
        );
        if let Some(user) = user {
            let line = Command::new("htpasswd")
                .args(["-Bbn", user, "secret"])
                .output()
                .expect("htpasswd (apache2-utils) is installed by ./dev test");
            assert!(line.status.success(), "htpasswd failed");
            std::fs::write(dir.join("htpasswd"), line.stdout).unwrap();
            config.push_str(&format!(
                "auth:\n  htpasswd:\n    realm: moat-test\n    path: {}\n",
                dir.join("htpasswd").display()
            ));
        }
        std::fs::write(dir.join("config.yml"), config).unwrap();
        let log = std::fs::File::create(dir.join("registry.log")).unwrap();
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(dir.join("config.yml"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("docker-registry (Debian package) is installed by ./dev test");
        let host = format!("127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(&host).is_err() {
            assert!(
                Instant::now() < deadline,
                "the registry did not start: {}",
                std::fs::read_to_string(dir.join("registry.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Self {
            child,
            host,
            _dir: dir,
        }
    }

    fn source(&self, repository: &str) -> OciSource {
        match Source::parse(&format!("oci://{}/{repository}", self.host), Path::new("")).unwrap() {
            Source::Oci(oci) => oci,
            other => panic!("not an OCI source: {other:?}"),
        }
    }
}

impl Drop for TestRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A fetcher with its own download store and an environment of only `env`.
fn fetcher(store: &Path, env: &[(&str, &str)]) -> Fetcher {
    let env: HashMap<String, String> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Fetcher::new(Some(Store::open(store).unwrap()), Progress::hidden())
        .with_env(Arc::new(move |name| env.get(name).cloned()))
}

fn read(path: &str) -> Vec<u8> {
    std::fs::read(path).unwrap()
}

fn error_of<T: std::fmt::Debug>(result: anyhow::Result<T>) -> String {
    format!("{:#}", result.unwrap_err())
}

/// Compiles a fetched component under `name` and returns the registry holding it.
fn load(name: &str, source: Source, fetched: Fetched) -> Registry {
    let sources = [PluginSource {
        name: name.into(),
        source,
        limits: Default::default(),
        grants: Default::default(),
        tools: Default::default(),
    }];
    let (registry, errors) = Registry::load_fetched(
        engine(),
        &sources,
        vec![Ok(fetched)],
        None,
        None,
        &Policy::none(),
    )
    .unwrap();
    assert!(errors.is_empty(), "{:?}", errors[0].error);
    registry
}

#[tokio::test(flavor = "multi_thread")]
async fn push_then_pull_by_tag_and_by_digest() {
    let registry = TestRegistry::start("roundtrip", None);
    let store = TempDir::new("roundtrip-store");
    let fetcher = fetcher(&store, &[]);
    let tagged = registry.source("moat/echo:1.0");

    let pushed = fetcher.push(&tagged, &read(ECHO), None).await.unwrap();
    assert_eq!(pushed.digest, Digest::of(&read(ECHO)));
    assert!(pushed.manifest.starts_with("sha256:"), "{pushed:?}");

    let by_tag = fetcher.fetch(&Source::Oci(tagged.clone())).await.unwrap();
    assert_eq!(by_tag.digest, pushed.digest);
    assert_eq!(by_tag.wasm, read(ECHO));
    assert!(
        by_tag.origin.contains(&pushed.manifest),
        "{}",
        by_tag.origin
    );

    // The artifact is a real Wasm one: the registry stored the layer and config media types.
    let pinned = Source::parse(&tagged.pinned(&pushed.manifest), Path::new("")).unwrap();
    let by_digest = fetcher.fetch(&pinned).await.unwrap();
    assert_eq!(by_digest.digest, pushed.digest);
    assert!(
        by_digest.origin.contains("kept from before"),
        "{}",
        by_digest.origin
    );

    // A fresh store downloads it again, and the plugin works.
    let empty = TempDir::new("roundtrip-fresh");
    let fetched = fetcher_for(&empty).fetch(&pinned).await.unwrap();
    assert!(!fetched.origin.contains("kept"), "{}", fetched.origin);
    let registry_of_plugins = load("echo", pinned, fetched);
    let plugin = &registry_of_plugins.plugins()[0];
    assert_eq!(plugin.digest, pushed.digest);
    let result = call(plugin, "echo_echo", json!({"message": "from a registry"})).await;
    assert_eq!(text(&result), "from a registry");
}

fn fetcher_for(dir: &TempDir) -> Fetcher {
    fetcher(dir, &[])
}

#[tokio::test(flavor = "multi_thread")]
async fn registry_errors_are_precise() {
    let registry = TestRegistry::start("errors", None);
    let store = TempDir::new("errors-store");
    let fetcher = fetcher(&store, &[]);
    fetcher
        .push(&registry.source("moat/echo:1"), &read(ECHO), None)
        .await
        .unwrap();

    let missing_tag = fetcher
        .fetch(&Source::Oci(registry.source("moat/echo:2")))
        .await;
    assert!(error_of(missing_tag).contains("not found in 127.0.0.1"));
    let wrong_digest = registry.source(&format!("moat/echo@{}", Digest::of(b"nothing")));
    let wrong_digest = fetcher.fetch(&Source::Oci(wrong_digest)).await;
    assert!(error_of(wrong_digest).contains("not found in 127.0.0.1"));

    // A container image's layout is not a component artifact; nothing is downloaded.
    let client = oci_client::Client::new(oci_client::client::ClientConfig {
        protocol: oci_client::client::ClientProtocol::Http,
        ..Default::default()
    });
    let image: oci_client::Reference = format!("{}/moat/image:1", registry.host).parse().unwrap();
    let layer = oci_client::client::ImageLayer::oci_v1(b"not a tar".to_vec(), None);
    let config = oci_client::client::Config::oci_v1(b"{}".to_vec(), None);
    client
        .push(
            &image,
            &[layer],
            config,
            &oci_client::secrets::RegistryAuth::Anonymous,
            None,
        )
        .await
        .unwrap();
    let image = fetcher
        .fetch(&Source::Oci(registry.source("moat/image:1")))
        .await;
    let error = error_of(image);
    assert!(
        error.contains("not a Wasm component artifact")
            && error.contains("application/vnd.oci.image.config.v1+json"),
        "{error}"
    );

    // Right media types, wrong content: a core module is refused after the download.
    let module = b"\0asm\x01\x00\x00\x00".to_vec();
    let layer = oci_client::client::ImageLayer::new(module, "application/wasm".into(), None);
    let config = oci_client::client::Config::new(
        b"{}".to_vec(),
        "application/vnd.wasm.config.v0+json".into(),
        None,
    );
    let module_ref: oci_client::Reference =
        format!("{}/moat/module:1", registry.host).parse().unwrap();
    client
        .push(
            &module_ref,
            &[layer],
            config,
            &oci_client::secrets::RegistryAuth::Anonymous,
            None,
        )
        .await
        .unwrap();
    let module = fetcher
        .fetch(&Source::Oci(registry.source("moat/module:1")))
        .await;
    assert!(error_of(module).contains("core WebAssembly module"));

    // moat itself does not push what is not a component.
    let refused = fetcher
        .push(&registry.source("moat/bad:1"), b"<html></html>", None)
        .await;
    assert!(error_of(refused).contains("not a WebAssembly component"));

    let gone = fetcher
        .fetch(&registry_source_at(free_port(), "moat/echo:1"))
        .await;
    assert!(error_of(gone).contains("cannot reach the registry"));
}

fn registry_source_at(port: u16, repository: &str) -> Source {
    Source::parse(
        &format!("oci://127.0.0.1:{port}/{repository}"),
        Path::new(""),
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn registry_credentials_come_from_a_docker_config_or_the_environment() {
    let registry = TestRegistry::start("auth", Some("alice"));
    let store = TempDir::new("auth-store");
    let source = registry.source("private/echo:1");

    let anonymous = fetcher(&store, &[]).push(&source, &read(ECHO), None).await;
    let error = error_of(anonymous);
    assert!(
        error.contains("access denied by 127.0.0.1") && error.contains("no credentials given"),
        "{error}"
    );

    let from_env = fetcher(
        &store,
        &[
            ("MOAT_REGISTRY", &registry.host),
            ("MOAT_REGISTRY_USER", "alice"),
            ("MOAT_REGISTRY_PASSWORD", "secret"),
        ],
    );
    from_env.push(&source, &read(ECHO), None).await.unwrap();

    let wrong = fetcher(
        &store,
        &[
            ("MOAT_REGISTRY", &registry.host),
            ("MOAT_REGISTRY_USER", "alice"),
            ("MOAT_REGISTRY_PASSWORD", "guess"),
        ],
    );
    let error = error_of(wrong.fetch(&Source::Oci(source.clone())).await);
    assert!(
        error.contains("user \"alice\" from MOAT_REGISTRY_USER"),
        "{error}"
    );

    // Credentials for another registry are not sent to this one.
    let elsewhere = fetcher(
        &store,
        &[
            ("MOAT_REGISTRY", "registry.example.com"),
            ("MOAT_REGISTRY_USER", "alice"),
            ("MOAT_REGISTRY_PASSWORD", "secret"),
        ],
    );
    let error = error_of(elsewhere.fetch(&Source::Oci(source.clone())).await);
    assert!(error.contains("no credentials given"), "{error}");

    let docker = TempDir::new("auth-docker");
    let auth = base64::engine::general_purpose::STANDARD.encode("alice:secret");
    std::fs::write(
        docker.join("config.json"),
        json!({"auths": {(registry.host.clone()): {"auth": auth}}}).to_string(),
    )
    .unwrap();
    let docker_dir = docker.display().to_string();
    let from_docker = fetcher(&store, &[("DOCKER_CONFIG", &docker_dir)]);
    let fetched = from_docker.fetch(&Source::Oci(source)).await.unwrap();
    assert_eq!(fetched.digest, Digest::of(&read(ECHO)));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_moved_tag_is_refused_until_relocked() {
    let registry = TestRegistry::start("lock", None);
    let store = TempDir::new("lock-store");
    let config_dir = TempDir::new("lock-config");
    let fetcher = fetcher(&store, &[]);
    let tag = registry.source("moat/tool:stable");
    fetcher.push(&tag, &read(ECHO), None).await.unwrap();

    let sources = vec![PluginSource {
        name: "tool".into(),
        source: Source::Oci(tag.clone()),
        limits: Default::default(),
        grants: Default::default(),
        tools: Default::default(),
    }];
    let fetched = vec![fetcher.fetch(&sources[0].source).await];
    let (loaded, errors) =
        Registry::load_fetched(engine(), &sources, fetched, None, None, &Policy::none()).unwrap();
    assert!(errors.is_empty());
    let lock = loaded.lock(&sources, &config_dir).unwrap();
    let lock_path = config_dir.join("moat.lock");
    lock.write(&lock_path).unwrap();
    let lock = Lock::read(&lock_path).unwrap().unwrap();
    assert_eq!(lock.plugins["tool"].digest, Digest::of(&read(ECHO)));
    assert!(
        lock.plugins["tool"]
            .tools
            .contains(&"tool_echo".to_string())
    );

    // Unchanged: it loads.
    let mut fetched = vec![fetcher.fetch(&sources[0].source).await];
    lock.enforce(&config_dir, &sources, &mut fetched);
    assert!(fetched[0].is_ok());

    // Someone pushes another component under the same tag: refused, with both digests.
    fetcher.push(&tag, &read(TEXT), None).await.unwrap();
    let mut fetched = vec![fetcher.fetch(&sources[0].source).await];
    lock.enforce(&config_dir, &sources, &mut fetched);
    let error = error_of(fetched.pop().unwrap());
    assert_eq!(
        error,
        format!(
            "plugin \"tool\": {tag} now has {} (the tag moved), moat.lock pins {}; run `moat lock` \
             to accept",
            Digest::of(&read(TEXT)),
            Digest::of(&read(ECHO))
        )
    );
    // Re-locking shows what the new version changes.
    let fetched = vec![fetcher.fetch(&sources[0].source).await];
    let (loaded, _) =
        Registry::load_fetched(engine(), &sources, fetched, None, None, &Policy::none()).unwrap();
    let new = loaded.lock(&sources, &config_dir).unwrap();
    let report = lock.report(&new).join("\n");
    assert!(
        report.starts_with("changed  tool:\n  digest   sha256:"),
        "{report}"
    );
    assert!(report.contains("tools    + tool_base64_decode"), "{report}");
    assert!(report.contains("- tool_echo"), "{report}");
}

/// One file an HTTP server hands out, with an `ETag` or a `Last-Modified` date, counting what it
/// answered.
#[derive(Default)]
struct Served {
    body: Vec<u8>,
    version: u32,
    full: usize,
    not_modified: usize,
}

async fn serve_file(
    served: Arc<Mutex<Served>>,
    headers: HeaderMap,
    validator: &'static str,
) -> axum::response::Response {
    let mut served = served.lock().unwrap();
    let value = match validator {
        "etag" => format!("\"v{}\"", served.version),
        _ => format!("Mon, 0{} Nov 2026 10:00:00 GMT", served.version),
    };
    let (name, condition) = match validator {
        "etag" => (header::ETAG, header::IF_NONE_MATCH),
        _ => (header::LAST_MODIFIED, header::IF_MODIFIED_SINCE),
    };
    if headers.get(&condition).is_some_and(|v| v == value.as_str()) {
        served.not_modified += 1;
        return (StatusCode::NOT_MODIFIED, [(name, value)]).into_response();
    }
    served.full += 1;
    (StatusCode::OK, [(name, value)], served.body.clone()).into_response()
}

async fn start_http_server(
    served: Arc<Mutex<Served>>,
) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    use axum::routing::get;
    let etag = served.clone();
    let dated = served.clone();
    let app = axum::Router::new()
        .route(
            "/etag/tool.wasm",
            get(move |headers| serve_file(etag.clone(), headers, "etag")),
        )
        .route(
            "/dated/tool.wasm",
            get(move |headers| serve_file(dated.clone(), headers, "date")),
        )
        .route("/page.wasm", get(|| async { "<html>Sign in</html>" }));
    crate::loopback::serve(app).await
}

#[tokio::test(flavor = "multi_thread")]
async fn urls_are_revalidated_and_a_changed_file_is_fetched_again() {
    let served = Arc::new(Mutex::new(Served {
        body: read(ECHO),
        version: 1,
        ..Default::default()
    }));
    let (addr, _server) = start_http_server(served.clone()).await;
    let store = TempDir::new("url-store");
    let fetcher = fetcher(&store, &[]);

    for validator in ["etag", "dated"] {
        {
            let mut served = served.lock().unwrap();
            served.body = read(ECHO);
            served.version = 1;
            served.full = 0;
            served.not_modified = 0;
        }
        let url = format!("http://{addr}/{validator}/tool.wasm");
        let source = Source::parse(&url, Path::new("")).unwrap();
        assert_eq!(source.default_name(), "tool");

        let first = fetcher.fetch(&source).await.unwrap();
        assert_eq!(first.digest, Digest::of(&read(ECHO)), "{validator}");
        let again = fetcher.fetch(&source).await.unwrap();
        assert_eq!(again.digest, first.digest);
        assert!(again.origin.contains("unchanged"), "{}", again.origin);
        {
            let served = served.lock().unwrap();
            assert_eq!((served.full, served.not_modified), (1, 1), "{validator}");
        }

        {
            let mut served = served.lock().unwrap();
            served.body = read(TEXT);
            served.version = 2;
        }
        let changed = fetcher.fetch(&source).await.unwrap();
        assert_eq!(changed.digest, Digest::of(&read(TEXT)), "{validator}");
        assert_eq!(served.lock().unwrap().full, 2);
        let plugins = load("tool", source, changed);
        assert_eq!(plugins.plugins()[0].digest, Digest::of(&read(TEXT)));
    }

    let missing = Source::parse(&format!("http://{addr}/nothing.wasm"), Path::new("")).unwrap();
    let error = error_of(fetcher.fetch(&missing).await);
    assert!(error.contains("not found (HTTP 404 Not Found)"), "{error}");
    let page = Source::parse(&format!("http://{addr}/page.wasm"), Path::new("")).unwrap();
    let error = error_of(fetcher.fetch(&page).await);
    assert!(
        error.contains("not a WebAssembly component") && error.contains("<html>Sign in"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_kept_download_serves_while_the_server_is_away() {
    let served = Arc::new(Mutex::new(Served {
        body: read(ECHO),
        version: 1,
        ..Default::default()
    }));
    let (addr, server) = start_http_server(served).await;
    let store = TempDir::new("url-offline");
    let source = Source::parse(&format!("http://{addr}/etag/tool.wasm"), Path::new("")).unwrap();
    fetcher(&store, &[]).fetch(&source).await.unwrap();

    server.abort();
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(addr).is_ok() {
        assert!(Instant::now() < deadline, "the server did not stop");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A new fetcher: no connection kept alive from before.
    let kept = fetcher(&store, &[]).fetch(&source).await.unwrap();
    assert_eq!(kept.digest, Digest::of(&read(ECHO)));
    assert!(
        kept.origin.contains("server was unreachable"),
        "{}",
        kept.origin
    );

    let empty = TempDir::new("url-offline-empty");
    let error = error_of(fetcher(&empty, &[]).fetch(&source).await);
    assert!(error.contains(&format!("cannot reach {addr}")), "{error}");
}

/// A server that sends its headers at once and then one body byte a second, for ever.
async fn start_trickling_server() -> SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut request = [0u8; 4096];
                let _ = stream.read(&mut request).await;
                let head = "HTTP/1.1 200 OK\r\ncontent-type: application/wasm\r\n\
                            content-length: 1000000\r\n\r\n";
                if stream.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                loop {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    if stream.write_all(b"\0").await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread")]
async fn a_trickling_download_is_given_up_at_the_deadline() {
    let addr = start_trickling_server().await;
    let store = TempDir::new("url-trickle");
    let source = Source::parse(&format!("http://{addr}/slow.wasm"), Path::new("")).unwrap();
    let slow = fetcher(&store, &[("MOAT_FETCH_TIMEOUT_SECS", "2")]);
    let started = Instant::now();
    let error = error_of(slow.fetch(&source).await);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert!(
        error.contains(&format!("http://{addr}/slow.wasm")) && error.contains("within 2 s"),
        "{error}"
    );
    assert!(error.contains("MOAT_FETCH_TIMEOUT_SECS"), "{error}");

    let bad = fetcher(&store, &[("MOAT_FETCH_TIMEOUT_SECS", "soon")]);
    let error = error_of(bad.fetch(&source).await);
    assert!(
        error.contains("MOAT_FETCH_TIMEOUT_SECS=\"soon\""),
        "{error}"
    );
}

#[test]
fn a_folder_is_every_component_in_it() {
    let dir = TempDir::new("folder");
    std::fs::copy(ECHO, dir.join("echo.wasm")).unwrap();
    std::fs::copy(TEXT, dir.join("text-tools.wasm")).unwrap();
    std::fs::write(dir.join("README.md"), "not a plugin").unwrap();
    let sources = moat::serve::config::sources_from_args(&[dir.display().to_string()]).unwrap();
    let names: Vec<&str> = sources.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["echo", "text_tools"]);
    let (registry, errors) = Registry::load(engine(), &sources).unwrap();
    assert!(errors.is_empty());
    let digests: Vec<Digest> = registry.plugins().iter().map(|p| p.digest).collect();
    assert_eq!(digests, [Digest::of(&read(ECHO)), Digest::of(&read(TEXT))]);
}

/// Files an HTTP server hands out by path, each with the status it answers.
type Files = Arc<Mutex<HashMap<String, (StatusCode, Vec<u8>)>>>;

async fn start_file_server(files: Files) -> SocketAddr {
    use axum::extract::{Path as UrlPath, State};
    let app = axum::Router::new()
        .route(
            "/{*path}",
            axum::routing::get(
                |State(files): State<Files>, UrlPath(path): UrlPath<String>| async move {
                    match files.lock().unwrap().get(&path) {
                        Some((status, body)) => (*status, body.clone()).into_response(),
                        None => StatusCode::NOT_FOUND.into_response(),
                    }
                },
            ),
        )
        .with_state(files);
    crate::loopback::serve(app).await.0
}

/// Loads a fetched `echo` under `policy`: the publisher it was admitted as, or why not.
fn admit(source: Source, fetched: Fetched, policy: &Policy) -> Result<Option<String>, String> {
    let sources = [PluginSource {
        name: "echo".into(),
        source,
        limits: Default::default(),
        grants: Default::default(),
        tools: Default::default(),
    }];
    let (registry, errors) =
        Registry::load_fetched(engine(), &sources, vec![Ok(fetched)], None, None, policy).unwrap();
    match errors.into_iter().next() {
        Some(error) => Err(format!("{:#}", error.error)),
        None => Ok(registry.plugins()[0].admission.publisher.clone()),
    }
}

/// The minisign tool's signature of `wasm` by `secret`.
fn signature_of(wasm: &Path, secret: &Path) -> String {
    trust::minisign(&[
        "-S",
        "-s",
        secret.to_str().unwrap(),
        "-m",
        wasm.to_str().unwrap(),
    ]);
    std::fs::read_to_string(moat::supply::signing::signature_path(wasm)).unwrap()
}

/// In a fresh folder: `echo` signed by "acme", a signature of other bytes by the same key, and
/// a policy that admits only plugins acme signed.
fn signed_echo(name: &str) -> (TempDir, String, String, Policy) {
    let dir = TempDir::new(&format!("trust-{name}"));
    let (public, secret) = trust::key_pair(&dir, "acme");
    let echo = dir.join("echo.wasm");
    std::fs::copy(ECHO, &echo).unwrap();
    let text = dir.join("text.wasm");
    std::fs::copy(TEXT, &text).unwrap();
    let (signature, other) = (signature_of(&echo, &secret), signature_of(&text, &secret));
    (dir, signature, other, trust::signing_policy(&public))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_signature_published_beside_a_url_is_verified() {
    let (dir, signature, other, policy) = signed_echo("url-signed");
    let files: Files = Default::default();
    for folder in ["signed", "unsigned", "mismatched"] {
        let wasm = (StatusCode::OK, read(ECHO));
        files
            .lock()
            .unwrap()
            .insert(format!("{folder}/echo.wasm"), wasm);
    }
    let signature_at = |folder: &str, answer: Option<(StatusCode, &str)>| {
        let path = format!("{folder}/echo.wasm.minisig");
        let mut files = files.lock().unwrap();
        match answer {
            Some((status, text)) => files.insert(path, (status, text.as_bytes().to_vec())),
            None => files.remove(&path),
        };
    };
    signature_at("signed", Some((StatusCode::OK, &signature)));
    signature_at("mismatched", Some((StatusCode::OK, &other)));
    let addr = start_file_server(files.clone()).await;
    let store = TempDir::new("url-signed-store");
    let fetcher = fetcher(&store, &[]);
    let source = |folder: &str| {
        Source::parse(&format!("http://{addr}/{folder}/echo.wasm"), Path::new("")).unwrap()
    };

    let signed = fetcher.fetch(&source("signed")).await.unwrap();
    assert_eq!(signed.signature.as_deref(), Some(signature.as_str()));
    assert_eq!(
        admit(source("signed"), signed, &policy),
        Ok(Some("acme".into()))
    );

    // A server that cannot hand out the signature now: the one kept with these bytes is used.
    signature_at("signed", Some((StatusCode::SERVICE_UNAVAILABLE, "")));
    let kept = fetcher.fetch(&source("signed")).await.unwrap();
    assert_eq!(kept.signature.as_deref(), Some(signature.as_str()));
    // A server that says there is none is believed.
    signature_at("signed", None);
    let withdrawn = fetcher.fetch(&source("signed")).await.unwrap();
    assert_eq!(withdrawn.signature, None);

    let unsigned = fetcher.fetch(&source("unsigned")).await.unwrap();
    assert_eq!(unsigned.signature, None);
    let error = admit(source("unsigned"), unsigned, &policy).unwrap_err();
    assert!(error.contains("and the plugin is unsigned"), "{error}");

    let mismatched = fetcher.fetch(&source("mismatched")).await.unwrap();
    let error = admit(source("mismatched"), mismatched, &policy).unwrap_err();
    assert!(
        error.contains("does not match the component's bytes"),
        "{error}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_signature_pushed_with_an_artifact_is_verified_after_a_pull() {
    let (dir, signature, other, policy) = signed_echo("oci-signed");
    let registry = TestRegistry::start("signed", None);
    let store = TempDir::new("oci-signed-store");
    let fetcher = fetcher(&store, &[]);
    let tags =
        ["signed", "unsigned", "mismatched"].map(|t| registry.source(&format!("acme/echo:{t}")));
    let [signed, unsigned, mismatched] = &tags;
    fetcher
        .push(signed, &read(ECHO), Some(&signature))
        .await
        .unwrap();
    fetcher.push(unsigned, &read(ECHO), None).await.unwrap();
    fetcher
        .push(mismatched, &read(ECHO), Some(&other))
        .await
        .unwrap();

    // The first pull downloads the component, the second finds it kept: both bring the
    // signature from the artifact.
    for _ in 0..2 {
        let fetched = fetcher.fetch(&Source::Oci(signed.clone())).await.unwrap();
        assert_eq!(fetched.signature.as_deref(), Some(signature.as_str()));
        let source = Source::Oci(signed.clone());
        assert_eq!(admit(source, fetched, &policy), Ok(Some("acme".into())));
    }

    let fetched = fetcher.fetch(&Source::Oci(unsigned.clone())).await.unwrap();
    assert_eq!(fetched.signature, None);
    let error = admit(Source::Oci(unsigned.clone()), fetched, &policy).unwrap_err();
    assert!(error.contains("and the plugin is unsigned"), "{error}");

    let fetched = fetcher
        .fetch(&Source::Oci(mismatched.clone()))
        .await
        .unwrap();
    let error = admit(Source::Oci(mismatched.clone()), fetched, &policy).unwrap_err();
    assert!(
        error.contains("does not match the component's bytes"),
        "{error}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_kept_pull_serves_while_the_registry_is_away() {
    let (dir, signature, _, policy) = signed_echo("oci-offline");
    let registry = TestRegistry::start("offline", None);
    let store = TempDir::new("oci-offline-store");
    let tag = registry.source("acme/echo:1");
    let pushed = fetcher(&store, &[])
        .push(&tag, &read(ECHO), Some(&signature))
        .await
        .unwrap();
    fetcher(&store, &[])
        .fetch(&Source::Oci(tag.clone()))
        .await
        .unwrap();

    let host = registry.host.clone();
    drop(registry);
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(&host).is_ok() {
        assert!(Instant::now() < deadline, "the registry did not stop");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let kept = fetcher(&store, &[])
        .fetch(&Source::Oci(tag.clone()))
        .await
        .unwrap();
    assert_eq!(kept.digest, pushed.digest);
    assert!(
        kept.origin.contains("registry was unreachable") && kept.origin.contains(&pushed.manifest),
        "{}",
        kept.origin
    );
    // The signature was kept too: the plugin is still admitted as acme's.
    assert_eq!(kept.signature.as_deref(), Some(signature.as_str()));
    let admitted = admit(Source::Oci(tag.clone()), kept, &policy);
    assert_eq!(admitted, Ok(Some("acme".into())));

    let empty = TempDir::new("oci-offline-empty");
    let error = error_of(fetcher(&empty, &[]).fetch(&Source::Oci(tag)).await);
    assert!(
        error.contains(&format!("cannot reach the registry {host}")),
        "{error}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
