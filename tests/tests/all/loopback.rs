//! What the network tests share: a real HTTP server on 127.0.0.1 that answers with a closure and
//! remembers every request it received, and plugins loaded through a real `moat.toml`.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::http::{HeaderMap, Request, Response};
use moat::supply::PluginSource;
use moat_tests::TempDir;

/// A request as the server saw it.
#[derive(Clone, Debug)]
pub struct Seen {
    /// The path and query.
    pub uri: String,
    pub headers: HeaderMap,
}

/// Serves `app` on an ephemeral port of 127.0.0.1 until the task is aborted.
pub async fn serve(app: axum::Router) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, task)
}

/// An HTTP server on an ephemeral port of 127.0.0.1, stopped when dropped.
pub struct Server {
    pub addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Server {
    /// Starts a server that answers every request with `respond`.
    pub async fn start(respond: impl Fn(&Seen) -> Response<Body> + Send + Sync + 'static) -> Self {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = seen.clone();
        let respond = Arc::new(respond);
        let app = axum::Router::new().fallback(move |request: Request<Body>| {
            let seen = Seen {
                uri: request
                    .uri()
                    .path_and_query()
                    .map_or("/".into(), |p| p.to_string()),
                headers: request.headers().clone(),
            };
            record.lock().unwrap().push(seen.clone());
            let respond = respond.clone();
            async move { respond(&seen) }
        });
        let (addr, task) = serve(app).await;
        Self { addr, seen, task }
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Every request received so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A response with `status`, one `content-type` and a body.
pub fn respond(status: u16, content_type: &str, body: impl Into<String>) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", content_type)
        .body(Body::from(body.into()))
        .unwrap()
}

/// A redirect to `location`.
pub fn redirect(location: &str) -> Response<Body> {
    Response::builder()
        .status(302)
        .header("location", location)
        .body(Body::empty())
        .unwrap()
}

/// A fresh folder for one test's `moat.toml` and secrets, removed when dropped.
pub struct ConfigDir(pub TempDir);

impl ConfigDir {
    pub fn new() -> Self {
        Self(TempDir::new("net"))
    }

    /// Writes a secrets file that only its owner may read.
    pub fn secrets(&self, text: &str) -> std::path::PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = self.0.join("secrets.toml");
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        path
    }

    /// Writes `moat.toml` with one plugin, `[plugins.{name}]` holding `path = wasm` and then
    /// `entry`, and reads it as moat does.
    pub fn source(&self, name: &str, wasm: &str, top: &str, entry: &str) -> PluginSource {
        let path = self.0.join("moat.toml");
        std::fs::write(
            &path,
            format!("{top}\n[plugins.{name}]\npath = {wasm:?}\n{entry}\n"),
        )
        .unwrap();
        let mut sources = moat::serve::config::read(&path).unwrap_or_else(|e| panic!("{e:#}"));
        sources.pop().expect("one plugin")
    }
}
