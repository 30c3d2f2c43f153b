//! Stopping without losing work. Once moat is told to stop (`draining`, SIGTERM):
//!
//! 1. for the notice period (`[http] drain_seconds`) it serves on, while `/readyz` answers 503
//!    and new legacy sessions are refused, so that load balancers take it out;
//! 2. then it takes no new work: a request that would run a guest is answered 503, "not
//!    processed" (a balancer may send it to another replica), while the calls and task runs in
//!    progress go on, and answers to what they ask still reach them;
//! 3. once none runs and every answer is out (a call's slot is given back before its answer is
//!    written), or `[http] drain_finish_seconds` have passed, it stops serving (what still runs
//!    is stopped) and exits. Each call ends by its own deadline anyway: the bound only keeps a
//!    stop from waiting longer than the operator allows.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use futures_util::StreamExt as _;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::access::quotas::Quotas;
use crate::mcp::catalogue::Catalogue;

/// How long a drain waits for the calls in progress unless `[http] drain_finish_seconds` says:
/// the deadline of a plugin that sets none, so that such calls finish.
pub const DEFAULT_FINISH: Duration = Duration::from_secs(30);

/// When moat stops taking work, and how long it waits for what runs.
#[derive(Clone)]
pub struct Drain {
    /// Cancelled when moat is told to stop.
    pub draining: CancellationToken,
    /// How long it serves on once `draining` is cancelled.
    pub notice: Duration,
    /// Cancelled when the notice is over: new work is refused from then on.
    pub stopping: CancellationToken,
    /// How long it then waits for the calls in progress, at most.
    pub finish: Duration,
    /// Requests that run a guest whose answer is not yet all written.
    answering: Arc<watch::Sender<usize>>,
}

/// One request counted as answering until dropped.
pub struct Answering(Arc<watch::Sender<usize>>);

impl Answering {
    /// `answer`, counted until its body is all written (or dropped).
    pub fn until_written(self, answer: Response) -> Response {
        let (parts, body) = answer.into_parts();
        let body = body.into_data_stream().map(move |chunk| {
            let _ = &self;
            chunk
        });
        Response::from_parts(parts, Body::from_stream(body))
    }
}

impl Drop for Answering {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n -= 1);
    }
}

impl Default for Drain {
    fn default() -> Self {
        Self {
            draining: CancellationToken::new(),
            notice: Duration::ZERO,
            stopping: CancellationToken::new(),
            finish: DEFAULT_FINISH,
            answering: Arc::new(watch::Sender::new(0)),
        }
    }
}

impl Drain {
    /// Counts a request that runs a guest from now until its answer is written
    /// ([`Answering::until_written`]) or dropped with its connection.
    pub fn answering(&self) -> Answering {
        self.answering.send_modify(|n| *n += 1);
        Answering(self.answering.clone())
    }

    /// Resolves once no call holds a slot and every answer is written.
    async fn all_done(&self, quotas: &Quotas) {
        let mut answering = self.answering.subscribe();
        loop {
            let _ = answering.wait_for(|n| *n == 0).await;
            quotas.none_running().await;
            // A task may have started a run, or a request come in, meanwhile.
            if *answering.borrow() == 0 && quotas.running() == 0 {
                return;
            }
        }
    }

    /// Goes through the drain once `draining` is cancelled, then cancels `shutdown` (unless it
    /// is cancelled first: a second signal stops at once).
    pub async fn run(self, catalogue: &Catalogue, shutdown: CancellationToken) {
        let quotas = catalogue.quotas();
        tokio::select! {
            () = self.draining.cancelled() => {}
            () = shutdown.cancelled() => return,
        }
        if !self.notice.is_zero() {
            tracing::info!(
                "draining: /readyz answers 503 and new sessions are refused; requests are served \
                 for {} s more",
                self.notice.as_secs_f64()
            );
            tokio::select! {
                () = tokio::time::sleep(self.notice) => {}
                () = shutdown.cancelled() => return,
            }
        }
        self.stopping.cancel();
        let running = quotas.running().max(*self.answering.borrow());
        if running > 0 {
            tracing::info!(
                "taking no new work; waiting up to {} s for the {running} call(s) running to \
                 finish",
                self.finish.as_secs_f64()
            );
            tokio::select! {
                () = self.all_done(quotas) => {
                    tracing::info!("every call running has finished");
                }
                () = tokio::time::sleep(self.finish) => {
                    tracing::warn!(
                        "{} call(s) still running after {} s ([http] drain_finish_seconds): \
                         stopping them",
                        quotas.running(),
                        self.finish.as_secs_f64()
                    );
                    catalogue.stopping_calls().cancel();
                }
                () = shutdown.cancelled() => return,
            }
        }
        tracing::info!("no longer taking requests");
        shutdown.cancel();
    }
}
