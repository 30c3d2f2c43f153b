//! Progress bars for downloads and compiles, drawn only when stderr is a terminal: in a pipe, a
//! log file or under an MCP host they would be noise.

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Where progress bars go, if anywhere.
#[derive(Clone)]
pub struct Progress(Option<MultiProgress>);

impl Progress {
    /// Bars on stderr when it is a terminal, none otherwise.
    pub fn for_stderr() -> Self {
        if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
            Self(Some(MultiProgress::with_draw_target(
                ProgressDrawTarget::stderr(),
            )))
        } else {
            Self::hidden()
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
