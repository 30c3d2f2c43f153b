//! Ends a run that hangs: a server that stops answering would otherwise block a read forever.
//! Past the deadline the watchdog kills the servers the harness started (by their ids), so the
//! blocked read ends and the run fails with the server's log; if even that does not end it, the
//! process exits.

use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

/// The ids of the server processes alive right now.
static SERVERS: Mutex<Vec<u32>> = Mutex::new(Vec::new());

/// Notes a server the harness started.
pub fn register(pid: u32) {
    SERVERS.lock().expect("server list").push(pid);
}

/// Forgets a server that has been stopped.
pub fn unregister(pid: u32) {
    SERVERS.lock().expect("server list").retain(|&p| p != pid);
}

/// Starts the watchdog for a run that should take well under `deadline`.
pub fn start(deadline: Duration) {
    std::thread::spawn(move || {
        std::thread::sleep(deadline);
        eprintln!("moat-perf: still running after {deadline:?}; stopping the servers");
        let pids = SERVERS.lock().map(|s| s.clone()).unwrap_or_default();
        for pid in pids {
            let _ = Command::new("kill")
                .arg("-KILL")
                .arg(pid.to_string())
                .status();
        }
        std::thread::sleep(Duration::from_secs(30));
        eprintln!("moat-perf: the run did not end; giving up");
        std::process::exit(1);
    });
}
