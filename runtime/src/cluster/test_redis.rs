//! A `redis-server` of a test's own, for the tests of what is kept in Redis.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A `redis-server` of its own on a free loopback port, stopped when dropped.
pub struct RedisServer(Child, pub String);

impl RedisServer {
    /// A replica (`r1`) connected to it.
    pub fn cluster(&self) -> std::sync::Arc<super::Cluster> {
        let settings = super::Settings {
            redis: self.1.clone(),
            replica: "r1".into(),
        };
        super::Cluster::connect(&settings).unwrap()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts one, or says why not: required under CI, which installs it (`./dev test`).
pub fn redis_server() -> Option<RedisServer> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let started = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .stdout(Stdio::null())
        .spawn();
    let child = match started {
        Ok(child) => child,
        Err(error) if std::env::var_os("CI").is_none() => {
            eprintln!("skipped: redis-server could not start ({error}); `./dev test` installs it");
            return None;
        }
        Err(error) => panic!("redis-server could not start: {error}"),
    };
    let server = RedisServer(child, format!("redis://127.0.0.1:{port}"));
    for _ in 0..100 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Some(server);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("redis-server did not listen on port {port}");
}
