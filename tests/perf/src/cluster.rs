//! moat on many machines: what sharing state through Redis costs one replica (P10: P2's load,
//! and one session's p50, under a rate quota decided in Redis against the same quota kept in
//! process), and calls per second through the repository's haproxy.cfg to 1, 2 and 3 replicas
//! sharing one Redis (P11), with the Redis round trips a call costs and what Redis itself takes.

use std::io::{Read as _, Write as _};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use serde_json::json;

use crate::http::{HttpServer, HttpSession, free_addr};
use crate::report::{Row, Target};
use crate::stats::{interleaved, median, micros};
use crate::{Bench, CLIENTS, MESSAGE, check_echo};

/// A rate no load here reaches: the quota is decided on every request, never refused.
const RATE: u64 = 1_000_000_000;

/// A process the benchmark started, stopped when dropped.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A `redis-server` on loopback.
struct Redis {
    _process: Process,
    port: u16,
}

impl Redis {
    fn start(log: &Path) -> Result<Self> {
        let port = free_addr()?.port();
        let child = Command::new(program("redis-server")?)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(log)?)
            .stderr(Stdio::null())
            .spawn()
            .context("starting redis-server (Debian package redis-server)")?;
        let redis = Self {
            _process: Process(child),
            port,
        };
        wait_for(SocketAddr::from(([127, 0, 0, 1], port)), "redis-server")?;
        Ok(redis)
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    fn cli(&self, args: &[&str]) -> Result<String> {
        let out = Command::new(program("redis-cli")?)
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()
            .context("running redis-cli")?;
        ensure!(out.status.success(), "redis-cli {args:?} failed");
        Ok(String::from_utf8(out.stdout)?)
    }

    /// Redis's own rate of single `EVALSHA`s of a script like the quota's, from 50 clients.
    fn own_rate(&self, requests: usize) -> Result<f64> {
        let script = "return redis.call('INCR', KEYS[1])";
        let sha = self.cli(&["SCRIPT", "LOAD", script])?;
        let out = Command::new(program("redis-benchmark")?)
            .args(["-p", &self.port.to_string(), "-q", "-c", "50"])
            .args([
                "-n",
                &requests.to_string(),
                "EVALSHA",
                sha.trim(),
                "1",
                "bench",
            ])
            .output()
            .context("running redis-benchmark")?;
        let text = String::from_utf8_lossy(&out.stdout);
        // "EVALSHA …: 81234.55 requests per second, p50=…"
        let rate = text
            .rsplit(':')
            .find_map(|part| part.trim().split(' ').next()?.parse::<f64>().ok())
            .with_context(|| format!("redis-benchmark printed no rate: {text}"))?;
        Ok(rate)
    }
}

/// haproxy with the repository's configuration, its servers replaced by `replicas`.
struct Haproxy {
    _process: Process,
    addr: SocketAddr,
}

impl Haproxy {
    fn start(repo_config: &Path, work: &Path, replicas: &[SocketAddr]) -> Result<Self> {
        let text = std::fs::read_to_string(repo_config)
            .with_context(|| format!("reading {}", repo_config.display()))?;
        let servers: String = replicas
            .iter()
            .enumerate()
            .map(|(i, addr)| format!("    server moat{} {addr}\n", i + 1))
            .collect();
        let kept: String = text
            .lines()
            .filter(|line| !line.trim_start().starts_with("server moat"))
            .map(|line| format!("{line}\n"))
            .collect();
        ensure!(
            kept.len() < text.len(),
            "no `server moat…` lines in haproxy.cfg"
        );
        let config = work.join(format!("haproxy-{}.cfg", replicas.len()));
        std::fs::write(&config, kept + &servers)?;
        let addr = free_addr()?;
        let child = Command::new(program("haproxy")?)
            .arg("-f")
            .arg(&config)
            .env("MOAT_FRONTEND", addr.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(work.join("haproxy.log"))?)
            .spawn()
            .context("starting haproxy (Debian package haproxy)")?;
        let haproxy = Self {
            _process: Process(child),
            addr,
        };
        wait_for(addr, "haproxy")?;
        // Every replica passes its health checks (rise 2 at 1 s) before the load starts.
        std::thread::sleep(Duration::from_millis(2500));
        Ok(haproxy)
    }
}

/// The Redis round trips the replicas at `addrs` have made so far, by their own count
/// (`moat_cluster_redis_seconds`: every command and script moat sends, not what scripts run).
fn round_trips(addrs: &[SocketAddr]) -> Result<u64> {
    let mut total = 0;
    for addr in addrs {
        let mut stream = std::net::TcpStream::connect(addr)?;
        write!(
            stream,
            "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {}\r\n\
             Connection: close\r\n\r\n",
            crate::http::TOKEN
        )?;
        let mut text = String::new();
        stream.read_to_string(&mut text)?;
        total += text
            .lines()
            .find_map(|line| line.strip_prefix("moat_cluster_redis_seconds_count "))
            .and_then(|count| count.trim().parse::<u64>().ok())
            .with_context(|| format!("no moat_cluster_redis_seconds_count from {addr}"))?;
    }
    Ok(total)
}

/// `name` on the PATH, or in /usr/sbin where Debian puts haproxy.
fn program(name: &str) -> Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin")])
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
        .with_context(|| format!("{name} is not installed (./dev bench installs it)"))
}

fn wait_for(addr: SocketAddr, what: &str) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(addr).is_err() {
        if Instant::now() > deadline {
            bail!("{what} did not listen on {addr} within 30 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

impl Bench {
    /// A moat.toml serving echo under a rate quota, shared through `redis` when given.
    fn quota_config(&self, name: &str, redis: Option<&Redis>) -> Result<String> {
        let echo = self.plugin("echo").canonicalize()?;
        let mut text = format!(
            "[plugins.echo]\npath = {:?}\n[quotas]\nrequests_per_minute = {RATE}\n",
            echo.to_str().context("a non-UTF-8 path")?
        );
        if let Some(redis) = redis {
            text += &format!(
                "[cluster]\nredis = \"{}\"\nreplica = \"${{env:MOAT_REPLICA}}\"\n\
                 [http]\nrequest_state_key = \"perf-request-state-key-0123456789abcdef\"\n",
                redis.url()
            );
        }
        let path = self.work.join(format!("{name}.toml"));
        std::fs::write(&path, text)?;
        Ok(path
            .to_str()
            .context("a non-UTF-8 temp folder")?
            .to_string())
    }

    fn quota_server(&self, name: &str, config: &str) -> Result<HttpServer> {
        let addr = free_addr()?;
        let mut command = self.moat_command(
            &["serve", "--http", &addr.to_string(), "--config", config],
            &self.warm_cache(),
        );
        command.env("MOAT_REPLICA", name);
        HttpServer::spawn(command, addr, &self.log(name))
    }

    /// P10: P2's load, and one session's call-by-call p50, with the rate quota decided in Redis
    /// against the same quota kept in process; and the Redis round trips a call costs.
    pub(crate) fn cluster_cost(&mut self) -> Result<()> {
        self.warm_bundled("echo")?;
        let redis = Redis::start(&self.log("redis-p10"))?;
        let shared_config = self.quota_config("p10-shared", Some(&redis))?;
        let alone_config = self.quota_config("p10-alone", None)?;
        let shared = self.quota_server("moat-p10-shared", &shared_config)?;
        let alone = self.quota_server("moat-p10-alone", &alone_config)?;
        let tools = ["echo_echo".to_string()];
        let [shared_rate, alone_rate] =
            self.alternate_rates([&shared, &alone], crate::http::TOKEN, &tools)?;
        self.rows.push(Row {
            id: "P10",
            what: format!(
                "HTTP tools/call echo under a rate quota, {CLIENTS} sessions: [cluster] (Redis) \
                 against the quota in process, calls/s (median of {} rounds)",
                shared_rate.len()
            ),
            unit: "calls/s",
            moat: Some(median(shared_rate)),
            baseline: Some(("no [cluster]", median(alone_rate))),
            target: Target::RatioAtLeast(0.9),
        });

        let calls = self.settings.stdio_calls;
        let mut sessions = self.runtime.block_on(async {
            anyhow::Ok([
                HttpSession::open(shared.addr).await?,
                HttpSession::open(alone.addr).await?,
            ])
        })?;
        let before = round_trips(&[shared.addr])?;
        let [with, without] = interleaved(calls, |which| {
            let started = Instant::now();
            let call = sessions[which].call_tool("echo_echo", json!({"message": MESSAGE}));
            check_echo(&self.runtime.block_on(call)?)?;
            Ok(started.elapsed())
        })?;
        let trips = round_trips(&[shared.addr])? - before;
        self.rows.push(Row {
            id: "P10",
            what:
                "HTTP tools/call echo under a rate quota, one session: [cluster] (Redis) against \
                   the quota in process, p50"
                    .into(),
            unit: "µs",
            moat: Some(micros(with.p50)),
            baseline: Some(("no [cluster]", micros(without.p50))),
            target: Target::RatioAtMost(1.2),
        });
        let timed = (calls + calls / 10) as f64;
        self.notes.push(format!(
            "P10: {:.2} Redis round trips per call of a legacy session under a rate quota ({trips} \
             over {timed} calls)",
            trips as f64 / timed,
        ));
        Ok(())
    }

    /// P11: calls per second through haproxy (the repository's haproxy.cfg) to 1, 2 and 3
    /// replicas sharing one Redis, against one replica asked directly.
    pub(crate) fn replicas_throughput(&mut self) -> Result<()> {
        self.warm_bundled("echo")?;
        let redis = Redis::start(&self.log("redis-p11"))?;
        let config = self.quota_config("p11", Some(&redis))?;
        let replicas: Vec<HttpServer> = (1..=3)
            .map(|i| self.quota_server(&format!("moat-p11-{i}"), &config))
            .collect::<Result<_>>()?;
        let tools = ["echo_echo".to_string()];
        let repo_config =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/haproxy/haproxy.cfg");
        let direct = self.rounds_of(replicas[0].addr, &tools)?;
        for n in 1..=3 {
            let addrs: Vec<SocketAddr> = replicas[..n].iter().map(|r| r.addr).collect();
            let haproxy = Haproxy::start(&repo_config, &self.work, &addrs)?;
            let before = round_trips(&addrs)?;
            let (rate, calls) = self.rounds_of(haproxy.addr, &tools)?;
            let trips = round_trips(&addrs)? - before;
            self.rows.push(Row {
                id: "P11",
                what: format!(
                    "HTTP tools/call echo through haproxy to {n} replica{} sharing Redis, \
                     {CLIENTS} sessions, calls/s (median of {} rounds)",
                    if n == 1 { "" } else { "s" },
                    self.settings.http_rounds
                ),
                unit: "calls/s",
                moat: Some(rate),
                baseline: Some(("1 replica, direct", direct.0)),
                target: Target::None,
            });
            self.notes.push(format!(
                "P11, {n} replica(s): {:.2} Redis round trips per call ({trips} over {calls} \
                 calls, each round's {CLIENTS} new sessions included)",
                trips as f64 / calls as f64
            ));
        }
        let requests = if self.settings.quick { 2_000 } else { 200_000 };
        let own = redis.own_rate(requests)?;
        self.notes.push(format!(
            "P11: this Redis runs {own:.0} EVALSHA/s from 50 clients on this machine"
        ));
        Ok(())
    }

    /// The median calls/s of `http_rounds` rounds of P2's load on `addr`, and the calls made.
    fn rounds_of(&self, addr: SocketAddr, tools: &[String]) -> Result<(f64, u64)> {
        let mut rates = Vec::new();
        let mut calls = 0;
        for _ in 0..self.settings.http_rounds {
            let load = self.runtime.block_on(crate::http::load_as(
                addr,
                crate::http::TOKEN,
                CLIENTS,
                tools,
                self.settings.http_round,
            ))?;
            calls += load.calls;
            rates.push(load.calls as f64 / load.elapsed.as_secs_f64());
        }
        Ok((median(rates), calls))
    }
}
