//! The `hostile` test plugin: one export per attack on its host, for moat's hostile-plugin suite
//! (`tests/hostile/`). Denied operations come back as `Err` with the OS error's text, so the suite
//! can tell "denied" from "crashed".

use std::ffi::c_int;
use std::fmt::Display;
use std::hint::black_box;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs, UdpSocket};
use std::time::Duration;

moat_guest::generate!("hostile");

/// Where `stash` leaves its secret for a later call to find (none may).
static STASHED: std::sync::Mutex<String> = std::sync::Mutex::new(String::new());

/// Pages `stash` and `recall` grow the memory by: 24 MiB, far above what the engine resets by
/// writing back its lowest bytes and within what it writes back of the pages a call dirtied.
const FAR_PAGES: usize = 384;

struct Hostile;

/// `"{step}: {error}"`, so the suite sees which step was refused.
fn at(step: &str) -> impl Fn(std::io::Error) -> String + '_ {
    move |e| format!("{step}: {e}")
}

fn bad_input(e: impl Display) -> String {
    format!("bad input: {e}")
}

impl Guest for Hostile {
    fn ok() -> String {
        "ok".into()
    }

    fn http_probe(url: String) -> String {
        let _ = moat_guest::http::get(&url, &[], 1024);
        "done".into()
    }

    fn http_get(url: String, follow: Option<bool>) -> Result<String, String> {
        let mut response = moat_guest::http::get(&url, &[], 1 << 20)?;
        if follow.unwrap_or(false)
            && let Some(location) = response.header("location").map(str::to_string)
        {
            response = moat_guest::http::get(&location, &[], 1 << 20)
                .map_err(|e| format!("following the redirect to {location}: {e}"))?;
        }
        Ok(show(&response))
    }

    fn http_get_decoded(url: String, header: String, value: String) -> Result<String, String> {
        let mut response = moat_guest::http::get(&url, &[(&header, &value)], 1 << 20)?;
        if response.header("content-encoding") == Some("x-reversed") {
            response.body.reverse();
        }
        Ok(show(&response))
    }

    fn http_request(method: String, url: String) -> Result<String, String> {
        use moat_guest::http::Method;
        let method = match method.to_ascii_uppercase().as_str() {
            "GET" => Method::Get,
            "HEAD" => Method::Head,
            "DELETE" => Method::Delete,
            "OPTIONS" => Method::Options,
            "TRACE" => Method::Trace,
            "CONNECT" => Method::Connect,
            _ => Method::Other(method),
        };
        Ok(show(&moat_guest::http::request(
            method,
            &url,
            &[],
            1 << 20,
        )?))
    }

    fn read_file(path: String) -> Result<String, String> {
        std::fs::read_to_string(&path).map_err(at("read"))
    }

    fn file(path: String) -> Result<String, String> {
        Self::read_file(path)
    }

    fn read_relative(cwd: String, path: String) -> Result<String, String> {
        std::env::set_current_dir(&cwd).map_err(at("chdir"))?;
        std::fs::read_to_string(&path).map_err(at("read"))
    }

    fn write_file(path: String, contents: String) -> Result<String, String> {
        std::fs::write(&path, contents).map_err(at("write"))?;
        Ok(format!("wrote {path}"))
    }

    fn remove_file(path: String) -> Result<String, String> {
        std::fs::remove_file(&path).map_err(at("remove"))?;
        Ok(format!("removed {path}"))
    }

    fn rename_file(from: String, to: String) -> Result<String, String> {
        std::fs::rename(&from, &to).map_err(at("rename"))?;
        Ok(format!("renamed {from} to {to}"))
    }

    fn metadata(path: String) -> Result<String, String> {
        let meta = std::fs::metadata(&path).map_err(at("metadata"))?;
        Ok(format!("{:?}, {} bytes", meta.file_type(), meta.len()))
    }

    fn symlink_and_read(target: String, link: String) -> Result<String, String> {
        symlink(&target, &link).map_err(at("symlink"))?;
        std::fs::read_to_string(&link).map_err(at("read"))
    }

    fn hard_link(original: String, link: String, write: Option<String>) -> Result<String, String> {
        std::fs::hard_link(&original, &link).map_err(at("link"))?;
        match write {
            Some(text) => {
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(&link)
                    .and_then(|mut f| f.write_all(text.as_bytes()))
                    .map_err(at("write"))?;
                Ok(format!("wrote through {link}"))
            }
            None => std::fs::read_to_string(&link).map_err(at("read")),
        }
    }

    fn open_many(path: String, count: u32, hold_ms: u32) -> Result<String, String> {
        let mut files = Vec::new();
        let mut failure = None;
        for _ in 0..count {
            match std::fs::File::open(&path) {
                Ok(file) => {
                    files.push(file);
                    // The host may stop the call at its handle cap: this says how far it got.
                    eprintln!("holding {} handles", files.len());
                }
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(u64::from(hold_ms)));
        match failure {
            Some(e) => Err(format!("opened {} handles, then: {e}", files.len())),
            None => Ok(format!("held {} open handles", files.len())),
        }
    }

    fn swap_for_symlink(path: String, target: String) -> Result<String, String> {
        std::fs::rename(&path, format!("{path}.moved")).map_err(at("rename"))?;
        symlink(&target, &path).map_err(at("symlink"))?;
        Ok(format!("{path} -> {target}"))
    }

    fn open_sockets(count: u32, hold_ms: u32) -> Result<String, String> {
        // wasi-libc's socket(): AF_INET is 1 and SOCK_STREAM 6 there.
        unsafe extern "C" {
            fn socket(domain: c_int, kind: c_int, protocol: c_int) -> c_int;
            fn close(fd: c_int) -> c_int;
        }
        let mut sockets = Vec::new();
        let mut failure = None;
        for _ in 0..count {
            // SAFETY: plain libc calls on descriptors this function owns.
            let fd = unsafe { socket(1, 6, 0) };
            if fd < 0 {
                failure = Some(std::io::Error::last_os_error());
                break;
            }
            sockets.push(fd);
        }
        std::thread::sleep(Duration::from_millis(u64::from(hold_ms)));
        let held = sockets.len();
        for fd in sockets {
            // SAFETY: as above.
            unsafe { close(fd) };
        }
        match failure {
            Some(e) => Err(format!("created {held} sockets, then: {e}")),
            None => Ok(format!("held {held} sockets")),
        }
    }

    fn flood_log(count: u32) -> Result<String, String> {
        let message = "x".repeat(16 << 10);
        for _ in 0..count {
            moat::plugin::log::log(moat::plugin::log::Level::Info, &message);
        }
        Ok(format!("logged {count} messages"))
    }

    fn list_dir(path: String) -> Result<String, String> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(&path).map_err(at("read_dir"))? {
            let entry = entry.map_err(at("entry"))?;
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
        names.sort();
        Ok(names.join("\n"))
    }

    fn env_vars() -> Result<String, String> {
        let mut vars: Vec<String> = std::env::vars_os()
            .map(|(k, v)| format!("{}={}", k.to_string_lossy(), v.to_string_lossy()))
            .collect();
        vars.sort();
        Ok(vars.join("\n"))
    }

    fn tcp_connect(address: String) -> Result<String, String> {
        let addr: SocketAddr = address.parse().map_err(bad_input)?;
        let mut stream =
            TcpStream::connect_timeout(&addr, Duration::from_secs(2)).map_err(at("connect"))?;
        stream
            .write_all(b"GET / HTTP/1.0\r\n\r\n")
            .map_err(at("send"))?;
        let mut reply = Vec::new();
        let _ = stream.take(1024).read_to_end(&mut reply);
        Ok(format!(
            "connected to {addr}; got: {}",
            String::from_utf8_lossy(&reply)
        ))
    }

    fn udp_send(address: String) -> Result<String, String> {
        let addr: SocketAddr = address.parse().map_err(bad_input)?;
        let local = if addr.is_ipv4() {
            "0.0.0.0:0"
        } else {
            "[::]:0"
        };
        let socket = UdpSocket::bind(local).map_err(at("bind"))?;
        let sent = socket.send_to(b"hostile", addr).map_err(at("send"))?;
        Ok(format!("sent {sent} bytes to {addr}"))
    }

    fn resolve(host: String) -> Result<String, String> {
        let addrs: Vec<String> = (host.as_str(), 80)
            .to_socket_addrs()
            .map_err(at("resolve"))?
            .map(|a| a.to_string())
            .collect();
        Ok(addrs.join("\n"))
    }

    fn spin() -> Result<String, String> {
        let mut turns = 0u64;
        loop {
            turns = black_box(turns.wrapping_add(1));
        }
    }

    fn recurse(depth: u32) -> Result<String, String> {
        let mut acc = 0u32;
        down(depth, &mut acc);
        Ok(format!("reached the bottom of {depth} frames ({acc})"))
    }

    fn recurse_fat(depth: u32) -> Result<String, String> {
        Ok(format!(
            "reached the bottom of {depth} fat frames ({})",
            fat(depth)
        ))
    }

    fn memory_bomb(chunk_kib: u32) -> Result<String, String> {
        let chunk = (chunk_kib.max(1) as usize) << 10;
        let mut hoard: Vec<Vec<u8>> = Vec::new();
        loop {
            let mut block = Vec::new();
            if block.try_reserve_exact(chunk).is_err() {
                return Err(format!(
                    "allocation failed after {} MiB",
                    (hoard.len() * chunk) >> 20
                ));
            }
            block.resize(chunk, 0xa5);
            hoard.push(black_box(block));
        }
    }

    fn flood_stdout() -> Result<String, String> {
        let mut stdout = std::io::stdout();
        let line = "flood ".repeat(100);
        loop {
            stdout
                .write_all(line.as_bytes())
                .and_then(|()| stdout.flush())
                .map_err(at("stdout"))?;
        }
    }

    fn flood_stderr() -> Result<String, String> {
        let mut stderr = std::io::stderr();
        let line = "flood ".repeat(100);
        loop {
            stderr
                .write_all(line.as_bytes())
                .and_then(|()| stderr.flush())
                .map_err(at("stderr"))?;
        }
    }

    fn giant_result(mib: u32) -> Result<String, String> {
        Ok("x".repeat((mib as usize) << 20))
    }

    fn giant_list(len: u32) -> Result<Vec<u8>, String> {
        Ok(vec![7; len as usize])
    }

    fn panic(message: String) -> Result<String, String> {
        panic!("{message}");
    }

    fn stash(secret: String) -> String {
        *STASHED.lock().unwrap() = secret.clone();
        Box::leak(secret.clone().into_boxed_str());
        let mut on_stack = [0u8; 256];
        let n = secret.len().min(on_stack.len());
        on_stack[..n].copy_from_slice(&secret.as_bytes()[..n]);
        black_box(&on_stack);
        // And in memory the call grew, once every MiB of it.
        let grown = core::arch::wasm32::memory_grow(0, FAR_PAGES);
        if grown != usize::MAX {
            for mib in 0..FAR_PAGES / 16 {
                let at = grown * 65536 + (mib << 20);
                for (j, b) in secret.bytes().enumerate() {
                    // SAFETY: `at + j` lies in the pages just grown, which nothing else uses.
                    unsafe { std::ptr::write_volatile((at + j) as *mut u8, b) };
                }
            }
        }
        "stashed".into()
    }

    fn recall(reversed: String) -> String {
        let needle = reversed.as_bytes();
        // Grown as far as `stash` grows it, so that the search covers the same addresses.
        core::arch::wasm32::memory_grow(0, FAR_PAGES);
        let size = core::arch::wasm32::memory_size(0) * 65536;
        // SAFETY: all of linear memory, 0 to its current size, is readable; address 0 is only
        // null to Rust, so it is read through a volatile pointer.
        let byte = |at: usize| unsafe { std::ptr::read_volatile(at as *const u8) };
        if needle.is_empty() {
            return "not found".into();
        }
        for at in 0..size.saturating_sub(needle.len()) {
            if (0..needle.len()).all(|j| byte(at + j) == needle[needle.len() - 1 - j]) {
                return format!("found at {at}");
            }
        }
        "not found".into()
    }

    fn sleep(ms: u32) -> Result<String, String> {
        std::thread::sleep(Duration::from_millis(u64::from(ms)));
        Ok("slept".into())
    }
}

/// `symlink(2)` from wasi-libc: std's own wrapper is still unstable on WASI.
fn symlink(target: &str, link: &str) -> std::io::Result<()> {
    use std::ffi::{CString, c_char};
    unsafe extern "C" {
        fn symlink(target: *const c_char, link: *const c_char) -> c_int;
    }
    let target = CString::new(target).map_err(std::io::Error::other)?;
    let link = CString::new(link).map_err(std::io::Error::other)?;
    // SAFETY: both are valid NUL-terminated strings that outlive the call.
    if unsafe { symlink(target.as_ptr(), link.as_ptr()) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Recursion with frames small enough to stay in wasm locals: the engine's stack runs out.
#[inline(never)]
fn down(n: u32, acc: &mut u32) {
    if n == 0 {
        return;
    }
    *acc = acc.wrapping_mul(31).wrapping_add(n);
    down(n - 1, acc);
    *acc ^= n;
}

/// Recursion with 4 KiB frames on the shadow stack in linear memory.
#[inline(never)]
fn fat(n: u32) -> u8 {
    let mut frame = [0u8; 4096];
    frame[n as usize % 4096] = n as u8;
    black_box(&mut frame);
    if n == 0 {
        frame[0]
    } else {
        fat(n - 1).wrapping_add(frame[7])
    }
}

export!(Hostile);

/// The status, the headers and the body of `response`: all the guest can see.
fn show(response: &moat_guest::http::Response) -> String {
    let headers: Vec<String> = response
        .headers
        .iter()
        .map(|(name, value)| format!("{name}: {value}"))
        .collect();
    format!(
        "status {}\n{}\n\n{}",
        response.status,
        headers.join("\n"),
        String::from_utf8_lossy(&response.body)
    )
}
