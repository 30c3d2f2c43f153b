//! P14: what the operators' console costs calls: P2's load (64 sessions over Streamable HTTP) on
//! a moat serving `[console]` with one operator watching the calls live (a viewer streaming
//! `/console/live/events` the whole time, which moat sends each call's start and end), against
//! the same moat without `[console]`, rounds alternating.
//!
//! The viewer signs in as a browser would from `moat console`'s one-time link: `POST
//! /console/link` with the local token, then the link, whose answer sets the session cookie. It
//! reads the event stream on a thread of its own over a plain HTTP/1.1 connection.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use anyhow::{Context, Result, bail, ensure};
use serde_json::Value;

use crate::http::{HttpServer, TOKEN};
use crate::report::{Row, Target};
use crate::stats::median;
use crate::{Bench, CLIENTS};

/// The console's session cookie.
const SESSION: &str = "__Host-moat-console";

impl Bench {
    fn console_server(&self, name: &str, console: bool) -> Result<HttpServer> {
        // `admins` defaults to ["local"]: the local token's caller is an operator.
        self.echo_server(name, if console { "[console]\n" } else { "" })
    }

    /// P14: P2 with a console open and streaming live calls against no console.
    pub(crate) fn console_cost(&mut self) -> Result<()> {
        self.warm_bundled("echo")?;
        let with = self.console_server("moat-p14-console", true)?;
        let without = self.console_server("moat-p14-none", false)?;
        let cookie = sign_in(with.addr).with_context(|| with.died())?;
        let viewer = Viewer::open(with.addr, &cookie).with_context(|| with.died())?;
        let tools = ["echo_echo".to_string()];
        let rates = self.alternate_rates([&with, &without], TOKEN, &tools);
        let seen = viewer.close();
        let [with_rate, without_rate] = rates?;
        let seen = seen.with_context(|| with.died())?;
        // Each call is two events, its start and its end.
        let calls: f64 = with_rate.iter().sum::<f64>() * self.settings.http_round.as_secs_f64();
        eprintln!(
            "moat-perf: P14: the console's viewer received {} call events (about {:.0} expected, \
             2 for each of the console moat's calls) and {} `missed` events saying {} were \
             dropped{}",
            seen.events,
            2.0 * calls,
            seen.missed_events,
            seen.missed,
            if seen.unreadable > 0 {
                format!("; {} call events' data was not JSON", seen.unreadable)
            } else {
                String::new()
            }
        );
        ensure!(
            seen.events > 0,
            "the console's viewer received no call event ({} `missed` events saying {} dropped)",
            seen.missed_events,
            seen.missed
        );
        self.rows.push(Row {
            id: "P14",
            what: format!(
                "HTTP tools/call echo, {CLIENTS} sessions, with a console open and streaming live \
                 calls against no console, calls/s (median of {} rounds)",
                with_rate.len()
            ),
            unit: "calls/s",
            moat: Some(median(with_rate)),
            baseline: Some(("no console", median(without_rate))),
            target: Target::RatioAtLeast(0.95),
        });
        Ok(())
    }
}

/// Signs a browser in to the console at `addr` with a one-time link; its session cookie.
fn sign_in(addr: SocketAddr) -> Result<String> {
    let link = format!(
        "POST /console/link HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\n\
         Content-Length: 0\r\nConnection: close\r\n\r\n"
    );
    let answer = exchange(addr, &link)?;
    ensure!(
        answer.status == 200,
        "POST /console/link answered {}",
        answer.describe()
    );
    let body: Value = serde_json::from_slice(&answer.body)
        .with_context(|| format!("POST /console/link answered {}", answer.describe()))?;
    let url = body["url"]
        .as_str()
        .with_context(|| format!("POST /console/link answered no url: {body}"))?;
    let path = url
        .strip_prefix(&format!("http://{addr}"))
        .filter(|p| p.starts_with("/console/enter/"))
        .with_context(|| format!("POST /console/link answered an unexpected url: {url}"))?;
    let enter = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    let answer = exchange(addr, &enter)?;
    ensure!(
        answer.status == 200,
        "GET {path} answered {}",
        answer.describe()
    );
    answer
        .headers
        .iter()
        .filter(|(name, _)| name == "set-cookie")
        .find_map(|(_, value)| {
            let (pair, _) = value.split_once(';').unwrap_or((value, ""));
            let (name, cookie) = pair.trim().split_once('=')?;
            (name == SESSION && !cookie.is_empty()).then(|| cookie.to_string())
        })
        .with_context(|| format!("GET {path} set no {SESSION} cookie: {}", answer.describe()))
}

/// An HTTP/1.1 response.
struct Answer {
    status: u16,
    /// Names in lower case.
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Everything it said, for an error.
    fn describe(&self) -> String {
        let headers: Vec<String> = self
            .headers
            .iter()
            .map(|(name, value)| format!("{name}: {value}"))
            .collect();
        format!(
            "HTTP {} [{}] {}",
            self.status,
            headers.join("; "),
            String::from_utf8_lossy(&self.body)
        )
    }
}

/// Sends `request` (which asks to close the connection) and reads the whole answer.
fn exchange(addr: SocketAddr, request: &str) -> Result<Answer> {
    let mut stream = TcpStream::connect(addr).with_context(|| format!("connecting to {addr}"))?;
    stream.write_all(request.as_bytes())?;
    let mut reader = BufReader::new(stream);
    let (status, headers) = read_head(&mut reader)?;
    let mut answer = Answer {
        status,
        headers,
        body: Vec::new(),
    };
    if answer
        .header("transfer-encoding")
        .is_some_and(|t| t.eq_ignore_ascii_case("chunked"))
    {
        Chunked::new(reader).read_to_end(&mut answer.body)?;
    } else if let Some(length) = answer.header("content-length") {
        let length: usize = length.trim().parse().context("a bad Content-Length")?;
        answer.body.resize(length, 0);
        reader.read_exact(&mut answer.body)?;
    } else {
        reader.read_to_end(&mut answer.body)?;
    }
    Ok(answer)
}

/// A response's status and headers (names in lower case).
fn read_head(reader: &mut impl BufRead) -> Result<(u16, Vec<(String, String)>)> {
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("not an HTTP status line: {line:?}"))?;
    let mut headers = Vec::new();
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 {
            bail!("the connection closed in the response's headers");
        }
        let line = line.trim_end();
        if line.is_empty() {
            return Ok((status, headers));
        }
        if let Some((name, value)) = line.split_once(':') {
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
        }
    }
}

/// A chunked body read as its bytes alone.
struct Chunked<R> {
    inner: R,
    /// Bytes left in the chunk being read.
    left: usize,
    /// Whether the CRLF that ends a chunk's data is still to be read.
    crlf: bool,
    done: bool,
}

impl<R: BufRead> Chunked<R> {
    fn new(inner: R) -> Self {
        Self {
            inner,
            left: 0,
            crlf: false,
            done: false,
        }
    }
}

impl<R: BufRead> Read for Chunked<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use std::io::{Error, ErrorKind};
        if self.done || buf.is_empty() {
            return Ok(0);
        }
        if self.left == 0 {
            let mut line = String::new();
            if self.crlf {
                self.inner.read_line(&mut line)?;
                self.crlf = false;
                line.clear();
            }
            if self.inner.read_line(&mut line)? == 0 {
                self.done = true;
                return Ok(0);
            }
            let size = line.trim().split(';').next().unwrap_or_default();
            self.left = usize::from_str_radix(size.trim(), 16).map_err(|_| {
                Error::new(ErrorKind::InvalidData, format!("a bad chunk size {line:?}"))
            })?;
            if self.left == 0 {
                self.done = true;
                return Ok(0);
            }
        }
        let wanted = buf.len().min(self.left);
        let read = self.inner.read(&mut buf[..wanted])?;
        if read == 0 {
            return Err(Error::new(
                ErrorKind::UnexpectedEof,
                "the stream ended in a chunk",
            ));
        }
        self.left -= read;
        self.crlf = self.left == 0;
        Ok(read)
    }
}

/// What the viewer saw.
struct Seen {
    /// `event: call`: a call's start or end.
    events: u64,
    /// `event: missed`: the viewer fell behind.
    missed_events: u64,
    /// The calls' events those said were dropped.
    missed: u64,
    /// Call events whose data was not JSON.
    unreadable: u64,
}

/// One operator's browser on `/console/live/events`, reading on a thread of its own.
struct Viewer {
    /// The connection, to shut down when done.
    stream: TcpStream,
    closing: Arc<AtomicBool>,
    reader: JoinHandle<Result<Seen>>,
}

impl Viewer {
    /// Opens the stream with the session `cookie`; it is watching once this returns.
    fn open(addr: SocketAddr, cookie: &str) -> Result<Self> {
        let mut stream =
            TcpStream::connect(addr).with_context(|| format!("connecting to {addr}"))?;
        let request = format!(
            "GET /console/live/events HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n\
             Cookie: {SESSION}={cookie}\r\n\r\n"
        );
        stream.write_all(request.as_bytes())?;
        let mut reader = BufReader::new(stream.try_clone()?);
        // moat subscribes the viewer before it answers: calls from now on are sent to it.
        let (status, headers) = read_head(&mut reader)?;
        let header = |name: &str| {
            headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
        };
        let streaming = header("content-type").is_some_and(|t| t.starts_with("text/event-stream"));
        if status != 200 || !streaming {
            let _ = stream.shutdown(Shutdown::Write);
            let mut body = Vec::new();
            let _ = reader.take(64 * 1024).read_to_end(&mut body);
            bail!(
                "GET /console/live/events answered HTTP {status} {headers:?} {}",
                String::from_utf8_lossy(&body)
            );
        }
        let chunked =
            header("transfer-encoding").is_some_and(|t| t.eq_ignore_ascii_case("chunked"));
        let closing = Arc::new(AtomicBool::new(false));
        let reader = {
            let closing = closing.clone();
            std::thread::spawn(move || {
                if chunked {
                    read_events(BufReader::new(Chunked::new(reader)), &closing)
                } else {
                    read_events(reader, &closing)
                }
            })
        };
        Ok(Self {
            stream,
            closing,
            reader,
        })
    }

    /// Closes the stream; what it carried.
    fn close(self) -> Result<Seen> {
        self.closing.store(true, Ordering::SeqCst);
        let _ = self.stream.shutdown(Shutdown::Both);
        match self.reader.join() {
            Ok(seen) => seen,
            Err(_) => bail!("the console's viewer panicked"),
        }
    }
}

/// Counts the events of an SSE stream until it ends; an end before `closing` is an error.
fn read_events(mut reader: impl BufRead, closing: &AtomicBool) -> Result<Seen> {
    let mut seen = Seen {
        events: 0,
        missed_events: 0,
        missed: 0,
        unreadable: 0,
    };
    // The event the data lines that follow belong to.
    let mut event = String::new();
    let mut line = String::new();
    loop {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) if closing.load(Ordering::SeqCst) => return Ok(seen),
            Ok(0) => bail!("the console's event stream ended while it was watched"),
            Err(error) => {
                return Err(error).context("reading the console's event stream");
            }
            Ok(_) => {}
        }
        let line = line.trim_end_matches(['\r', '\n']);
        if line.is_empty() {
            event.clear();
        } else if let Some(name) = line.strip_prefix("event:") {
            event = name.trim().to_string();
            match event.as_str() {
                "call" => seen.events += 1,
                "missed" => seen.missed_events += 1,
                _ => {}
            }
        } else if let Some(data) = line.strip_prefix("data:") {
            let data = data.trim();
            match event.as_str() {
                "call" if serde_json::from_str::<Value>(data).is_err() => seen.unreadable += 1,
                "missed" => seen.missed += data.parse::<u64>().unwrap_or(0),
                _ => {}
            }
        }
    }
}
