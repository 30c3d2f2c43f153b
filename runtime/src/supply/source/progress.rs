//! Progress bars for downloads and compiles, drawn only when stderr is a terminal: in a pipe, a
//! log file or under an MCP host they would be noise.

use std::sync::OnceLock;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Every bar on stderr, in one set: the log writer suspends them all while it writes.
static STDERR_BARS: OnceLock<MultiProgress> = OnceLock::new();

fn stderr_bars() -> &'static MultiProgress {
    STDERR_BARS.get_or_init(|| MultiProgress::with_draw_target(ProgressDrawTarget::stderr()))
}

/// Where progress bars go, if anywhere.
#[derive(Clone)]
pub struct Progress(Option<MultiProgress>);

impl Progress {
    /// Bars on stderr when it is a terminal, none otherwise.
    pub fn for_stderr() -> Self {
        if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
            Self(Some(stderr_bars().clone()))
        } else {
            Self::hidden()
        }
    }

    /// Runs `write` with the bars on stderr wiped and drawn again after it, so that a log line
    /// never lands glued to a spinner.
    pub fn suspend<R>(write: impl FnOnce() -> R) -> R {
        match STDERR_BARS.get() {
            Some(bars) => bars.suspend(write),
            None => write(),
        }
    }

    /// No bars at all.
    pub fn hidden() -> Self {
        Self(None)
    }

    /// A bar for `total` bytes (a spinner when the size is unknown) labelled `what`.
    pub fn download(&self, what: &str, total: Option<u64>) -> ProgressBar {
        let Some(multi) = &self.0 else {
            return ProgressBar::hidden();
        };
        let bar = match total {
            Some(total) => ProgressBar::new(total).with_style(
                ProgressStyle::with_template(
                    "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec}",
                )
                .expect("a valid template")
                .progress_chars("=> "),
            ),
            None => ProgressBar::new_spinner().with_style(
                ProgressStyle::with_template("{spinner} {msg} {bytes} {bytes_per_sec}")
                    .expect("a valid template"),
            ),
        };
        multi.add(bar.with_message(what.to_string()))
    }

    /// A spinner for work of unknown length, such as compiling plugins.
    pub fn spinner(&self, what: &str) -> ProgressBar {
        let Some(multi) = &self.0 else {
            return ProgressBar::hidden();
        };
        let bar = multi.add(ProgressBar::new_spinner().with_message(what.to_string()));
        bar.enable_steady_tick(std::time::Duration::from_millis(100));
        bar
    }
}
