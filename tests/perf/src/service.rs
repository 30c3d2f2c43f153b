//! moat as a shared service: what authentication costs (P6: a JWT verified on every request
//! against moat without authentication), and whether quotas keep callers apart (P7: one
//! caller's latency while 62 others call within their quotas and one floods past its own).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::http::{HttpServer, HttpSession, free_addr};
use crate::report::{Row, Target};
use crate::stats::{Stats, median, millis};
use crate::{Bench, MESSAGE, check_echo};

/// Principals in P7.
const PRINCIPALS: usize = 64;
/// Calls per second each well-behaved principal makes in P7.
const PACED_RATE: f64 = 10.0;
/// The flooding principal's quota in P7, requests per minute.
const NOISY_QUOTA: u32 = 10;
/// Connections the flooding principal floods on.
const FLOOD_CONNECTIONS: usize = 4;

/// A signing key made with openssl, and the JWKS that publishes it, served on loopback.
struct Issuer {
    url: String,
    key: EncodingKey,
    server: Child,
}

impl Drop for Issuer {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
    }
}

impl Issuer {
    /// An RSA key from `openssl`, its JWKS in `dir` served by Python's http.server.
    fn start(dir: &std::path::Path) -> Result<Self> {
        std::fs::create_dir_all(dir)?;
        let pem = dir.join("key.pem");
        let der = dir.join("key.der");
        run(Command::new("openssl")
            .args(["genpkey", "-algorithm", "RSA", "-pkeyopt"])
            .args(["rsa_keygen_bits:2048", "-out"])
            .arg(&pem))?;
        run(Command::new("openssl")
            .args(["rsa", "-traditional", "-outform", "DER", "-in"])
            .arg(&pem)
            .arg("-out")
            .arg(&der))?;
        let modulus = run(Command::new("openssl")
            .args(["rsa", "-noout", "-modulus", "-in"])
            .arg(&pem))?;
        let hex = modulus
            .trim()
            .strip_prefix("Modulus=")
            .context("openssl printed no modulus")?;
        let n: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16))
            .collect::<Result<_, _>>()?;
        let jwks = json!({"keys": [{"kty": "RSA", "kid": "perf", "alg": "RS256", "use": "sig",
                                    "n": URL_SAFE_NO_PAD.encode(n), "e": "AQAB"}]});
        std::fs::write(dir.join("jwks.json"), jwks.to_string())?;
        let addr = free_addr()?;
        let server = Command::new("python3")
            .args([
                "-m",
                "http.server",
                &addr.port().to_string(),
                "--bind",
                "127.0.0.1",
                "--directory",
            ])
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting python3 -m http.server for the JWKS")?;
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(addr).is_err() {
            if Instant::now() > deadline {
                bail!("the JWKS server did not listen within 30 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(Self {
            url: format!("http://{addr}"),
            key: EncodingKey::from_rsa_der(&std::fs::read(&der)?),
            server,
        })
    }

    /// An hour's access token for `audience`.
    fn token(&self, audience: &str) -> Result<String> {
        let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
        let mut header = Header::new(Algorithm::RS256);
        header.kid = Some("perf".into());
        let claims = json!({"iss": self.url, "aud": audience, "sub": "bench", "iat": now,
                            "exp": now + 3600, "scope": "tools", "client_id": "moat-perf"});
        Ok(jsonwebtoken::encode(&header, &claims, &self.key)?)
    }
}

fn run(command: &mut Command) -> Result<String> {
    let out = command
        .output()
        .with_context(|| format!("running {:?}", command.get_program()))?;
    if !out.status.success() {
        bail!(
            "{:?} failed: {}",
            command.get_program(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8(out.stdout)?)
}

/// The API key of P7's principal `i`.
fn key(i: usize) -> String {
    format!("moat_perf_principal_{i:02}_0123456789abcdefghijklmnop")
}

impl Bench {
    /// P6: HTTP calls per second with a JWT checked on every request, against the same moat
    /// with authentication off; rounds alternate.
    pub(crate) fn auth_throughput(&mut self) -> Result<()> {
        self.warm_bundled("echo")?;
        let issuer = Issuer::start(&self.work.join("issuer"))?;
        let echo = self.plugin("echo");
        let jwt_addr = free_addr()?;
        let config = self.work.join("jwt.toml");
        std::fs::write(
            &config,
            format!(
                "[plugins.echo]\npath = {:?}\n[auth.oauth]\nissuer = \"{}\"\njwks_uri = \"{}/jwks.json\"\n",
                echo.canonicalize()?,
                issuer.url,
                issuer.url
            ),
        )?;
        let config = config
            .to_str()
            .context("a non-UTF-8 temp folder")?
            .to_string();
        let with_jwt = HttpServer::spawn(
            self.moat_command(
                &[
                    "serve",
                    "--http",
                    &jwt_addr.to_string(),
                    "--config",
                    &config,
                ],
                &self.warm_cache(),
            ),
            jwt_addr,
            &self.log("moat-jwt"),
        )?;
        let open_addr = free_addr()?;
        let echo = echo.to_str().context("a non-UTF-8 path")?;
        let open = HttpServer::spawn(
            self.moat_command(
                &["serve", "--http", &open_addr.to_string(), "--no-auth", echo],
                &self.warm_cache(),
            ),
            open_addr,
            &self.log("moat-no-auth"),
        )?;
        let token = issuer.token(&format!("http://{jwt_addr}/mcp"))?;
        let tools = ["echo_echo".to_string()];
        let [jwt_rate, open_rate] = self.alternate_rates([&with_jwt, &open], &token, &tools)?;
        self.rows.push(Row {
            id: "P6",
            what: format!(
                "HTTP tools/call echo, {} sessions, a JWT (RS256) checked per request, calls/s \
                 (median of {} rounds)",
                crate::CLIENTS,
                jwt_rate.len()
            ),
            unit: "calls/s",
            moat: Some(median(jwt_rate)),
            baseline: Some(("moat --no-auth", median(open_rate))),
            target: Target::RatioAtLeast(0.95),
        });
        Ok(())
    }

    /// P7: one principal's p50 latency while 62 others call within their quotas and one floods
    /// past its own, against its p50 alone.
    pub(crate) fn quota_isolation(&mut self) -> Result<()> {
        self.warm_bundled("echo")?;
        let mut keys = String::new();
        for i in 0..PRINCIPALS {
            let digest: String = Sha256::digest(key(i).as_bytes())
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            keys.push_str(&format!("p{i:02} = \"sha256:{digest}\"\n"));
        }
        let config = self.work.join("quotas.toml");
        std::fs::write(
            &config,
            format!(
                "[plugins.echo]\npath = {:?}\n[auth.api_keys]\n{keys}\n[quotas]\n\
                 requests_per_minute = 60000\nconcurrent_calls = 8\n\
                 principals = {{ \"key:p00\" = {{ requests_per_minute = {NOISY_QUOTA} }} }}\n",
                self.plugin("echo").canonicalize()?
            ),
        )?;
        let config = config
            .to_str()
            .context("a non-UTF-8 temp folder")?
            .to_string();
        let addr = free_addr()?;
        let moat = HttpServer::spawn(
            self.moat_command(
                &["serve", "--http", &addr.to_string(), "--config", &config],
                &self.warm_cache(),
            ),
            addr,
            &self.log("moat-quotas"),
        )?;
        let duration = self.settings.http_round * 2;
        let (idle, (loaded, flood)) = self
            .runtime
            .block_on(async {
                let idle = measured(addr, duration).await?;
                let (loaded, _, flood) = tokio::try_join!(
                    measured(addr, duration),
                    paced(addr, duration),
                    flooding(addr, duration),
                )?;
                anyhow::Ok((idle, (loaded, flood)))
            })
            .with_context(|| moat.died())?;
        if flood.refused == 0 {
            bail!(
                "the flooding principal was never refused ({} calls accepted): its quota did not hold",
                flood.accepted
            );
        }
        self.rows.push(Row {
            id: "P7",
            what: format!(
                "p50 of one principal's calls while {} call {PACED_RATE}/s each within their \
                 quotas and one floods past its own ({} of its {} requests got 429); baseline: \
                 the same principal alone",
                PRINCIPALS - 2,
                flood.refused,
                flood.refused + flood.accepted
            ),
            unit: "ms",
            moat: Some(millis(loaded.p50)),
            baseline: Some(("alone", millis(idle.p50))),
            target: Target::RatioAtMost(1.5),
        });
        Ok(())
    }
}

/// Principal 1 calling one call after another; its latencies.
async fn measured(addr: std::net::SocketAddr, duration: Duration) -> Result<Stats> {
    let mut session = HttpSession::open_as(addr, &key(1)).await?;
    let mut times = Vec::new();
    let end = Instant::now() + duration;
    while Instant::now() < end {
        let started = Instant::now();
        check_echo(
            &session
                .call_tool("echo_echo", json!({"message": MESSAGE}))
                .await?,
        )?;
        times.push(started.elapsed());
    }
    Stats::of(times).context("no call was measured")
}

/// Principals 2 to 63, each calling [`PACED_RATE`] times a second, within its quota.
async fn paced(addr: std::net::SocketAddr, duration: Duration) -> Result<()> {
    let mut clients = tokio::task::JoinSet::new();
    for i in 2..PRINCIPALS {
        clients.spawn(async move {
            let mut session = HttpSession::open_as(addr, &key(i)).await?;
            let mut ticks = tokio::time::interval(Duration::from_secs_f64(1.0 / PACED_RATE));
            let end = Instant::now() + duration;
            while Instant::now() < end {
                ticks.tick().await;
                check_echo(
                    &session
                        .call_tool("echo_echo", json!({"message": MESSAGE}))
                        .await?,
                )?;
            }
            anyhow::Ok(())
        });
    }
    while let Some(done) = clients.join_next().await {
        done??;
    }
    Ok(())
}

struct Flood {
    accepted: u64,
    refused: u64,
}

/// Principal 0 calling as fast as it can on [`FLOOD_CONNECTIONS`] connections, past its quota.
async fn flooding(addr: std::net::SocketAddr, duration: Duration) -> Result<Flood> {
    // Every session opens before any floods: opening takes two of the principal's few requests
    // a minute, which a connection already flooding would have spent (then the open got 429).
    let mut sessions = Vec::new();
    for _ in 0..FLOOD_CONNECTIONS {
        sessions.push(HttpSession::open_as(addr, &key(0)).await?);
    }
    let mut clients = tokio::task::JoinSet::new();
    for mut session in sessions {
        clients.spawn(async move {
            let (mut accepted, mut refused) = (0, 0);
            let end = Instant::now() + duration;
            while Instant::now() < end {
                match session
                    .call_status("echo_echo", json!({"message": MESSAGE}))
                    .await?
                {
                    status if status.is_success() => accepted += 1,
                    hyper::StatusCode::TOO_MANY_REQUESTS => refused += 1,
                    status => bail!("the flood got HTTP {status}"),
                }
            }
            anyhow::Ok((accepted, refused))
        });
    }
    let mut flood = Flood {
        accepted: 0,
        refused: 0,
    };
    while let Some(done) = clients.join_next().await {
        let (accepted, refused) = done??;
        flood.accepted += accepted;
        flood.refused += refused;
    }
    Ok(flood)
}
