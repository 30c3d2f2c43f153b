//! A server's stderr read as it comes: every line is copied to the server's log, and the lines
//! that contain a marker are kept with the moment each arrived, so that the harness can time what
//! a server only reports in its log (moat swapping optimized code in).

use std::io::{BufRead, BufReader, Read, Write};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

/// A marked line and when the harness read it.
pub struct Mark {
    pub at: Instant,
    pub line: String,
}

/// The marked lines of one server's stderr, so far.
pub struct Marks {
    shared: Arc<(Mutex<State>, Condvar)>,
}

#[derive(Default)]
struct State {
    marks: Vec<Mark>,
    /// The server closed its stderr: no more lines will come.
    ended: bool,
}

impl Marks {
    /// Reads `stderr` on a thread of its own until it ends, copying it to `log` line by line.
    pub fn watch(stderr: impl Read + Send + 'static, mut log: std::fs::File, marker: &str) -> Self {
        let shared = Arc::new((Mutex::new(State::default()), Condvar::new()));
        let marks = Self {
            shared: shared.clone(),
        };
        let marker = marker.to_string();
        std::thread::spawn(move || {
            let mut stderr = BufReader::new(stderr);
            let mut line = Vec::new();
            let (state, changed) = &*shared;
            loop {
                line.clear();
                match stderr.read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                let at = Instant::now();
                // The log is only for reading afterwards; losing it must not stop the reading.
                let _ = log.write_all(&line);
                let text = String::from_utf8_lossy(&line);
                if text.contains(&marker) {
                    let line = text.trim_end().to_string();
                    state.lock().expect("marks").marks.push(Mark { at, line });
                    changed.notify_all();
                }
            }
            state.lock().expect("marks").ended = true;
            changed.notify_all();
        });
        marks
    }

    /// Waits until `done` finds what it looks for in the marked lines, the server's stderr ends,
    /// or `deadline` passes; what `done` found, if it did.
    pub fn wait<T>(
        &self,
        deadline: Instant,
        mut done: impl FnMut(&[Mark]) -> Option<T>,
    ) -> Option<T> {
        let (state, changed) = &*self.shared;
        let mut state = state.lock().expect("marks");
        loop {
            if let Some(found) = done(&state.marks) {
                return Some(found);
            }
            let now = Instant::now();
            if state.ended || now >= deadline {
                return None;
            }
            state = changed
                .wait_timeout(state, deadline - now)
                .expect("marks")
                .0;
        }
    }

    /// How many marked lines have come.
    pub fn count(&self) -> usize {
        self.shared.0.lock().expect("marks").marks.len()
    }
}
