//! What the watch ([`crate::serve::watch`]) serves now and how its last reload went, for the
//! operators' console; and the console's way to ask it for a reload.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use tokio::sync::mpsc;

use crate::serve::config::ConsoleSettings;

/// How one reload went.
#[derive(Clone, Debug)]
pub struct Reloaded {
    pub at: SystemTime,
    /// What started it: a file that changed, SIGHUP, an operator.
    pub reason: String,
    /// Why it failed, as the log says it; none when it succeeded.
    pub error: Option<String>,
}

/// What is served now, from the last reading of moat.toml that was applied.
#[derive(Clone, Debug, Default)]
pub struct Current {
    /// moat.toml, when one is served.
    pub path: Option<PathBuf>,
    /// Its text as read (secrets in it unmasked: mask before showing).
    pub text: String,
    pub console: Option<ConsoleSettings>,
    /// Where each plugin came from, by name.
    pub sources: HashMap<String, String>,
}

/// Shared by the watch and the console; cloning shares it.
#[derive(Clone, Default)]
pub struct Reloads {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    started: Mutex<Option<SystemTime>>,
    last: Mutex<Option<Reloaded>>,
    current: Mutex<Arc<Current>>,
    ask: Mutex<Option<mpsc::UnboundedSender<()>>>,
}

impl Reloads {
    /// The last reload, if there was one.
    pub fn last(&self) -> Option<Reloaded> {
        self.inner.last.lock().expect("reloads lock").clone()
    }

    /// What is served now.
    pub fn current(&self) -> Arc<Current> {
        self.inner.current.lock().expect("reloads lock").clone()
    }

    /// When moat started serving.
    pub fn started(&self) -> Option<SystemTime> {
        *self.inner.started.lock().expect("reloads lock")
    }

    /// Asks the watch for a reload; false when nothing watches.
    pub fn ask(&self) -> bool {
        let ask = self.inner.ask.lock().expect("reloads lock");
        ask.as_ref().is_some_and(|ask| ask.send(()).is_ok())
    }

    /// Serving `current` from now on.
    pub fn serving(&self, current: Current) {
        let mut started = self.inner.started.lock().expect("reloads lock");
        started.get_or_insert_with(SystemTime::now);
        *self.inner.current.lock().expect("reloads lock") = Arc::new(current);
    }

    pub(super) fn record(&self, reason: &str, error: Option<String>) {
        *self.inner.last.lock().expect("reloads lock") = Some(Reloaded {
            at: SystemTime::now(),
            reason: reason.to_string(),
            error,
        });
    }

    /// The requests for a reload, from now on.
    pub(super) fn asked(&self) -> mpsc::UnboundedReceiver<()> {
        let (ask, asked) = mpsc::unbounded_channel();
        *self.inner.ask.lock().expect("reloads lock") = Some(ask);
        asked
    }
}
