//! HTTPS for `moat serve --http`: rustls (with ring, as everywhere in moat) through axum-server,
//! the certificate and key read from PEM files and read again whenever either file changes, so
//! a renewed certificate is served without a restart. A renewal that cannot be read is logged
//! and the certificate in use stays.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};
use axum::extract::connect_info::IntoMakeServiceWithConnectInfo;
use axum_server::accept::NoDelayAcceptor;
use axum_server::tls_rustls::{RustlsAcceptor, RustlsConfig};
use tokio_util::sync::CancellationToken;

/// How often the certificate files are looked at.
pub const RELOAD_CHECK: Duration = Duration::from_secs(2);

/// The PEM files: a certificate chain, and its private key.
#[derive(Clone, Debug, PartialEq)]
pub struct Files {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl Files {
    fn modified(&self) -> Option<(SystemTime, SystemTime)> {
        let time = |path: &PathBuf| std::fs::metadata(path).and_then(|m| m.modified()).ok();
        Some((time(&self.cert)?, time(&self.key)?))
    }

    async fn load(&self) -> Result<RustlsConfig> {
        RustlsConfig::from_pem_file(&self.cert, &self.key)
            .await
            .with_context(|| {
                format!(
                    "reading the TLS certificate {} and key {}",
                    self.cert.display(),
                    self.key.display()
                )
            })
    }
}

pub async fn serve(
    app: IntoMakeServiceWithConnectInfo<axum::Router, SocketAddr>,
    addr: SocketAddr,
    files: Files,
    shutdown: CancellationToken,
) -> Result<()> {
    crate::supply::source::install_tls_provider();
    // The times are taken before the files are read, so a change from then on is seen.
    let seen = files.modified();
    let config = files.load().await?;
    tokio::spawn(reload_on_change(
        files,
        seen,
        config.clone(),
        shutdown.clone(),
    ));
    let handle = axum_server::Handle::new();
    let stopping = handle.clone();
    tokio::spawn(async move {
        shutdown.cancelled().await;
        stopping.graceful_shutdown(Some(Duration::from_secs(10)));
    });
    let listener = std::net::TcpListener::bind(addr).with_context(|| format!("binding {addr}"))?;
    listener.set_nonblocking(true)?;
    tracing::info!("serving MCP on https://{}/mcp", listener.local_addr()?);
    // TCP_NODELAY beneath TLS, for the reason `super::no_delay` gives.
    let acceptor = RustlsAcceptor::new(config).acceptor(NoDelayAcceptor::new());
    axum_server::from_tcp(listener)
        .context("serving HTTPS")?
        .acceptor(acceptor)
        .handle(handle)
        .serve(app)
        .await
        .context("serving HTTPS")
}

async fn reload_on_change(
    files: Files,
    mut seen: Option<(SystemTime, SystemTime)>,
    config: RustlsConfig,
    shutdown: CancellationToken,
) {
    let mut ticks = tokio::time::interval(RELOAD_CHECK);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let now = files.modified();
        if now.is_none() || now == seen {
            continue;
        }
        seen = now;
        match config.reload_from_pem_file(&files.cert, &files.key).await {
            Ok(()) => tracing::info!("reloaded the TLS certificate {}", files.cert.display()),
            Err(error) => tracing::error!(
                "the TLS certificate {} changed but cannot be read ({error}); still serving the \
                 one before",
                files.cert.display()
            ),
        }
    }
}
