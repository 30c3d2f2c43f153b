//! The hostile-plugin suite: every folder in `tests/hostile/` is one attack, its `case.toml` says
//! which tool of the `hostile` plugin to call, with what grants and limits, and how the attack
//! must fail. For every case the runner checks that:
//!
//! * the attack fails the expected way (a tool error, a call error, a refused load, or a result
//!   that shows nothing it should not), with the expected words in its message;
//! * nothing secret leaks: neither the file outside the grants, nor moat's own environment, nor
//!   anything the case lists in `not_contains`;
//! * nothing outside the writable grants changed on disk, and no connection reached the
//!   runner's listeners;
//! * the same loaded plugin answers a normal call right after.
//!
//! A case with `known_gap = "…"` documents a hole in moat: it is reported, not run (set
//! `MOAT_HOSTILE_RUN_GAPS=1` to run it and see whether the hole is still there).
//! `MOAT_HOSTILE_CASE=<folder>` runs one case only; `tests/hostile/README.md` describes `case.toml`.
//!
//! The fixture each case runs against is a fresh temp folder:
//!
//! ```text
//! inside/hello.txt          "hello from inside"
//! inside/sub/nested.txt     "nested"
//! spare/                    empty, for a second grant
//! outside/secret.txt        the secret no case may read
//! ```
//!
//! plus the case's `symlinks`. In arguments, symlink targets and network grants, `{root}` is that
//! folder's canonical path, `{port}` the port of a TCP listener on 127.0.0.1 and `{port6}` one on
//! [::1] (both must never be reached), and `{http_port}` the port of an HTTP server on 127.0.0.1
//! that answers "hello from the runner", redirects to `X` at `/redirect?to=X`, sends back
//! the request's headers at `/echo-headers`, and its `Authorization` encoded or cut as asked at
//! `/echo-encoded` (always encoded at `/echo-encoded-always`).

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use moat::plugin::Plugin;
use moat::plugin::tiers::Tiers;
use moat::sandbox::network::Resolver;
use moat::supply::PluginSource;
use moat_tests::{baseline_tiers, load_on, plugins, try_call};
use rmcp::model::CallToolResult;
use serde::Deserialize;
use serde_json::Value;

/// The file outside every grant, and what it holds.
const SECRET_FILE: &str = "outside/secret.txt";
const SECRET: &str = "s3cret-from-outside-7f3a";
/// A variable of moat's own environment, which no plugin may see unless granted.
const HOST_ENV_NAME: &str = "MOAT_HOSTILE_HOST_SECRET";
const HOST_ENV_VALUE: &str = "host-env-secret-91c2";
/// The fewest cases the suite may hold.
const MIN_CASES: usize = 20;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    /// What the attack tries, in a sentence.
    description: String,
    /// The plugin crate that attacks: `hostile` unless the attack is in the component itself.
    #[serde(default = "hostile")]
    plugin: String,
    /// The plugin's name in `moat.toml` when it is loaded beside the `hostile` plugin (cases that
    /// expect a load error); `attacker` unless set.
    #[serde(default = "attacker")]
    name: String,
    /// The function to call (its MCP name without the `hostile_` prefix).
    #[serde(default)]
    tool: Option<String>,
    #[serde(default)]
    args: toml::Table,
    /// Calls made first, in order, each in a fresh instance as every call is: the steps of an
    /// attack that spans calls. Their outcomes are not judged (a step may fail halfway and still
    /// have done its harm).
    #[serde(default)]
    before: Vec<Step>,
    /// Directory grants, as `moat.toml` writes them; `host` is relative to the fixture.
    #[serde(default)]
    files: Vec<toml::Value>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    symlinks: Vec<Symlink>,
    /// Network grants, as `moat.toml` writes them.
    #[serde(default)]
    network: Vec<String>,
    /// Header injections, as `moat.toml` writes them.
    #[serde(default)]
    inject: Vec<toml::Value>,
    /// The secrets file's contents, written private beside the case's `moat.toml`.
    #[serde(default)]
    secrets: BTreeMap<String, String>,
    /// Host names and the IP address each resolves to, instead of the system's resolver.
    #[serde(default)]
    resolve: BTreeMap<String, String>,
    /// Limits, as `moat.toml` writes them; unset ones keep moat's defaults.
    #[serde(default)]
    limits: toml::Table,
    /// Many calls at once instead of one.
    burst: Option<Burst>,
    expect: Expect,
    /// Why this case documents a hole in moat rather than a defence.
    known_gap: Option<String>,
}

fn hostile() -> String {
    "hostile".into()
}

fn attacker() -> String {
    "attacker".into()
}

/// A call made before the attack.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Step {
    tool: String,
    #[serde(default)]
    args: toml::Table,
}

/// A symlink made in the fixture before the call: `link` (relative to the fixture) → `target`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Symlink {
    link: String,
    target: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Burst {
    /// How many calls to start at once.
    calls: usize,
    /// How many of them must succeed; every other one must fail as `expect` says.
    succeed: usize,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Expect {
    kind: Kind,
    /// What the message (or, for `denied-result` and `ok`, the output) must contain: a string,
    /// or a list of strings of which one will do.
    #[serde(default)]
    message: Option<Message>,
    /// What neither the output nor the message may contain, besides the secret file and moat's
    /// environment, which are always checked.
    #[serde(default)]
    not_contains: Vec<String>,
    /// The longest the call may take, in milliseconds, from start to outcome.
    within_ms: Option<u64>,
    /// How much the host process's resident memory may grow during the call, guest memory
    /// included, in MiB (measured from the peak, on Linux).
    max_host_growth_mb: Option<u64>,
    /// Whether the host must be able to open files all through the call (a guest must not use
    /// up the process's file descriptors).
    #[serde(default)]
    host_keeps_fds: bool,
    /// Moat's cap on the handles one call may hold: the call must be stopped at this or at the
    /// process's per-call share of descriptors, whichever is lower, as the guest's last
    /// `holding N handles` line on stderr shows.
    max_handles: Option<usize>,
    /// The most moat may write to its own log for the plugin during the call, in KiB.
    max_log_kb: Option<u64>,
    /// Host paths (`{root}` and the ports filled in) that must exist before the call: the
    /// control that a guest's "No such file or directory" is moat hiding a real file, not a
    /// path that names nothing.
    #[serde(default)]
    exists_on_host: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Message {
    One(String),
    AnyOf(Vec<String>),
}

impl std::fmt::Display for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Message::One(m) => write!(f, "{m:?}"),
            Message::AnyOf(ms) => write!(f, "one of {ms:?}"),
        }
    }
}

impl Message {
    fn found_in(&self, text: &str) -> bool {
        match self {
            Message::One(m) => text.contains(m.as_str()),
            Message::AnyOf(ms) => ms.iter().any(|m| text.contains(m.as_str())),
        }
    }
}

#[derive(Debug, Deserialize, Clone, Copy, PartialEq)]
#[serde(rename_all = "kebab-case")]
enum Kind {
    /// The tool ran and returned its `err` (the OS refused it).
    ToolError,
    /// `Plugin::call` failed: deadline, trap, bad result, busy…
    CallError,
    /// The call succeeded, and its output shows only what was granted.
    DeniedResult,
    /// Either of the two above: the attack must fail, no matter how.
    AnyError,
    /// Moat refused to load the plugin.
    LoadError,
    /// A control: the call must succeed (so that the denials above are not vacuous).
    Ok,
}

impl Case {
    /// The case's plugin, grants and limits as moat itself reads them: a real `moat.toml`
    /// written into the fixture (so `host` folders resolve against it) and parsed by moat.
    fn source(&self, fixture: &Fixture, ports: Ports) -> PluginSource {
        let path = self.write_config(fixture, ports);
        let mut sources = moat::serve::config::read(&path)
            .unwrap_or_else(|e| panic!("the case's grants or limits: {e:#}"));
        let mut source = sources.pop().expect("one plugin");
        if !self.resolve.is_empty() {
            let mut network = (*source.grants.network).clone();
            network.resolver = Resolver::table(self.resolve.iter().map(|(name, ip)| {
                let ip = ip.parse().unwrap_or_else(|e| panic!("resolve {name}: {e}"));
                (name.clone(), vec![ip])
            }));
            source.grants.network = network.into();
        }
        source
    }

    /// Writes the case's `moat.toml` (and secrets file) into the fixture; returns its path.
    fn write_config(&self, fixture: &Fixture, ports: Ports) -> PathBuf {
        let mut entry = self.limits.clone();
        entry.insert("path".into(), plugin_path(&self.plugin).into());
        entry.insert("files".into(), self.files.clone().into());
        let env: toml::Table = self
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone().into()))
            .collect();
        entry.insert("env".into(), env.into());
        let network: Vec<toml::Value> = self
            .network
            .iter()
            .map(|grant| fixture.expand(grant, ports).into())
            .collect();
        entry.insert("network".into(), network.into());
        let inject: Vec<toml::Value> = self
            .inject
            .iter()
            .map(|i| expand_toml(i.clone(), fixture, ports))
            .collect();
        entry.insert("inject".into(), inject.into());
        let name = self.plugin.replace('-', "_");
        let mut config = toml::Table::from_iter([(
            "plugins".to_string(),
            toml::Table::from_iter([(name, entry.into())]).into(),
        )]);
        if !self.secrets.is_empty() {
            use std::os::unix::fs::PermissionsExt;
            let secrets = fixture.root.join("secrets.toml");
            let table: toml::Table = self
                .secrets
                .iter()
                .map(|(k, v)| (k.clone(), v.clone().into()))
                .collect();
            std::fs::write(&secrets, table.to_string()).expect("writing the secrets");
            std::fs::set_permissions(&secrets, std::fs::Permissions::from_mode(0o600)).unwrap();
            config.insert("secrets".into(), "secrets.toml".into());
        }
        let path = fixture.root.join("moat.toml");
        std::fs::write(&path, config.to_string()).expect("writing the case's moat.toml");
        path
    }
}

/// The folder of every case.
fn cases_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("hostile")
}

/// Every case folder's name, sorted.
fn case_names() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(cases_dir())
        .expect("reading tests/hostile")
        .flatten()
        .filter(|e| e.path().join("case.toml").is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn plugin_path(crate_name: &str) -> &'static str {
    match crate_name {
        "hostile" => plugins::HOSTILE,
        "wants-http" => plugins::WANTS_HTTP,
        "amplify" => plugins::AMPLIFY,
        "multi-memory" => crate::handmade::multi_memory(),
        other => panic!("no plugin crate {other} in the hostile suite"),
    }
}

/// The ports a case's text may name.
#[derive(Clone, Copy)]
struct Ports {
    port: u16,
    port6: u16,
    http_port: u16,
}

/// The listeners no plugin may reach.
struct Listeners {
    v4: TcpListener,
    v6: Option<TcpListener>,
}

impl Listeners {
    fn new() -> Self {
        let v4 = TcpListener::bind("127.0.0.1:0").expect("a listener on 127.0.0.1");
        v4.set_nonblocking(true).unwrap();
        let v6 = TcpListener::bind("[::1]:0").ok();
        if let Some(v6) = &v6 {
            v6.set_nonblocking(true).unwrap();
        }
        Self { v4, v6 }
    }

    fn port(&self) -> u16 {
        self.v4.local_addr().unwrap().port()
    }

    /// The IPv6 listener's port; without IPv6 on this host, the IPv4 one's (the connection fails
    /// either way, and must fail as refused by moat, not by the network).
    fn port6(&self) -> u16 {
        self.v6
            .as_ref()
            .map_or(self.port(), |l| l.local_addr().unwrap().port())
    }

    /// Connections that reached a listener since the last look.
    fn intruders(&self) -> Vec<String> {
        let mut found = Vec::new();
        for listener in std::iter::once(&self.v4).chain(&self.v6) {
            while let Ok((_, peer)) = listener.accept() {
                found.push(peer.to_string());
            }
        }
        found
    }
}

/// A fresh temp folder for one case.
struct Fixture {
    root: PathBuf,
}

impl Fixture {
    fn new(case: &str, symlinks: &[Symlink], ports: Ports) -> Self {
        let dir = std::env::temp_dir().join(format!("moat-hostile-{}-{case}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let root = dir.canonicalize().unwrap();
        for (path, contents) in [
            ("inside/hello.txt", "hello from inside"),
            ("inside/sub/nested.txt", "nested"),
            (SECRET_FILE, SECRET),
        ] {
            let path = root.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, contents).unwrap();
        }
        std::fs::create_dir_all(root.join("spare")).unwrap();
        let fixture = Self { root };
        for link in symlinks {
            let target = fixture.expand(&link.target, ports);
            std::os::unix::fs::symlink(&target, fixture.root.join(&link.link))
                .unwrap_or_else(|e| panic!("symlink {} -> {target}: {e}", link.link));
        }
        fixture
    }

    fn expand(&self, text: &str, ports: Ports) -> String {
        text.replace("{root}", &self.root.display().to_string())
            .replace("{port6}", &ports.port6.to_string())
            .replace("{http_port}", &ports.http_port.to_string())
            .replace("{port}", &ports.port.to_string())
    }

    /// Every file, folder and symlink under the fixture except those under `skip` (the writable
    /// grants), with its contents or target.
    fn snapshot(&self, skip: &[PathBuf]) -> BTreeMap<PathBuf, String> {
        fn walk(dir: &Path, skip: &[PathBuf], out: &mut BTreeMap<PathBuf, String>) {
            let Ok(entries) = std::fs::read_dir(dir) else {
                return;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                if skip.contains(&path) {
                    continue;
                }
                let meta = std::fs::symlink_metadata(&path).unwrap();
                let what = if meta.file_type().is_symlink() {
                    format!(
                        "symlink -> {}",
                        std::fs::read_link(&path).unwrap().display()
                    )
                } else if meta.is_dir() {
                    walk(&path, skip, out);
                    "dir".into()
                } else {
                    use std::os::unix::fs::MetadataExt;
                    format!(
                        "file, {} links: {:?}",
                        meta.nlink(),
                        std::fs::read_to_string(&path).unwrap_or_default()
                    )
                };
                out.insert(path, what);
            }
        }
        let mut out = BTreeMap::new();
        walk(&self.root, skip, &mut out);
        out
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// What a call gave back, as text for the checks.
fn outcome_text(outcome: &Result<CallToolResult, String>) -> String {
    match outcome {
        Ok(result) => {
            let mut text: Vec<String> = result
                .content
                .iter()
                .filter_map(|c| c.as_text().map(|t| t.text.clone()))
                .collect();
            if let Some(structured) = &result.structured_content {
                text.push(structured.to_string());
            }
            text.join("\n")
        }
        Err(e) => e.clone(),
    }
}

/// Describes an outcome briefly, for failure reports.
fn brief(outcome: &Result<CallToolResult, String>) -> String {
    let (label, text) = match outcome {
        Ok(r) if r.is_error == Some(true) => ("tool error", outcome_text(outcome)),
        Ok(_) => ("success", outcome_text(outcome)),
        Err(e) => ("call error", e.clone()),
    };
    let mut text = text.replace('\n', "⏎");
    if text.len() > 1500 {
        let mut end = 1500;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    format!("{label}: {text}")
}

/// Checks one outcome against the case's expectation; returns what is wrong.
fn check(expect: &Expect, outcome: &Result<CallToolResult, String>) -> Vec<String> {
    let kind = expect.kind;
    let mut problems = Vec::new();
    let kind_ok = match (kind, outcome) {
        (Kind::ToolError, Ok(r)) => r.is_error == Some(true),
        (Kind::CallError, Err(_)) => true,
        (Kind::AnyError, Err(_)) => true,
        (Kind::AnyError, Ok(r)) => r.is_error == Some(true),
        (Kind::DeniedResult | Kind::Ok, Ok(r)) => r.is_error != Some(true),
        _ => false,
    };
    if !kind_ok {
        problems.push(format!("expected {kind:?}, got {}", brief(outcome)));
    }
    let text = outcome_text(outcome);
    if let Some(message) = &expect.message
        && kind_ok
        && !message.found_in(&text)
    {
        problems.push(format!("expected {message} in {}", brief(outcome)));
    }
    if let Some(cap) = expect.max_handles {
        problems.extend(handle_cap_problem(cap, &text));
    }
    problems.extend(leaks(expect, &text));
    problems
}

/// Whether the guest was stopped at the handle cap in force: `cap`, or the process's per-call
/// share of descriptors when that is lower. The guest holds a few handles just to run (its
/// stdio, its preopened folders), so it gets to a little under the cap, never to it.
fn handle_cap_problem(cap: usize, text: &str) -> Option<String> {
    let cap = cap.min(moat::sandbox::descriptors::handles_per_call());
    let held = text
        .lines()
        .filter_map(|l| l.strip_prefix("holding ")?.strip_suffix(" handles"))
        .filter_map(|n| n.parse::<usize>().ok())
        .next_back();
    match held {
        Some(held) if held < cap && held + 8 >= cap => None,
        Some(held) => Some(format!(
            "the guest held {held} handles when it was stopped, not just under the cap of {cap}"
        )),
        None => Some(format!(
            "the guest never said how many handles it held (the cap is {cap})"
        )),
    }
}

/// Whatever secret `text` holds.
fn leaks(expect: &Expect, text: &str) -> Vec<String> {
    [SECRET, HOST_ENV_VALUE]
        .into_iter()
        .chain(expect.not_contains.iter().map(String::as_str))
        .filter(|s| text.contains(s))
        .map(|s| format!("LEAK: the output contains {s:?}"))
        .collect()
}

/// Runs one case; returns what went wrong (nothing when the defence held).
async fn run_case(
    name: &str,
    case: &Case,
    listeners: &Listeners,
    http: &crate::loopback::Server,
    tiers: Option<&Tiers>,
) -> Vec<String> {
    let ports = Ports {
        port: listeners.port(),
        port6: listeners.port6(),
        http_port: http.port(),
    };
    let fixture = Fixture::new(name, &case.symlinks, ports);
    let source = case.source(&fixture, ports);
    let writable: Vec<PathBuf> = source
        .grants
        .files
        .iter()
        .filter(|f| f.writable)
        .map(|f| f.host.clone())
        .collect();
    let before = fixture.snapshot(&writable);
    let mut problems: Vec<String> = case
        .expect
        .exists_on_host
        .iter()
        .map(|path| fixture.expand(path, ports))
        .filter(|path| !Path::new(path).exists())
        .map(|path| format!("{path} does not exist on the host: the case would prove nothing"))
        .collect();

    let plugin: Arc<Plugin> = if case.expect.kind == Kind::LoadError {
        // Loaded beside a well-behaved plugin, which must load and work all the same.
        let sources = [
            PluginSource {
                name: case.name.as_str().into(),
                ..source.clone()
            },
            PluginSource {
                name: "hostile".into(),
                source: moat::supply::source::Source::File(plugins::HOSTILE.into()),
                ..source
            },
        ];
        let rss_before = reset_peak_rss();
        let (registry, errors) = load_on(&sources, tiers);
        problems.extend(growth_problem(
            case.expect.max_host_growth_mb,
            rss_before,
            "the load",
        ));
        match errors.iter().find(|e| e.plugin == case.name) {
            None => problems.push("expected the load to fail, and it succeeded".into()),
            Some(error) => {
                let message = format!("{:#}", error.error);
                if let Some(expected) = &case.expect.message
                    && !expected.found_in(&message)
                {
                    problems.push(format!("expected {expected} in the load error: {message}"));
                }
            }
        }
        match registry.plugins().iter().find(|p| &*p.name == "hostile") {
            Some(plugin) => plugin.clone(),
            None => {
                problems.push(format!("the plugin loaded beside it failed: {errors:?}"));
                return problems;
            }
        }
    } else {
        let (registry, errors) = load_on(std::slice::from_ref(&source), tiers);
        if let Some(error) = errors.first() {
            panic!("loading {}: {:#}", error.plugin, error.error);
        }
        let plugin = registry.plugins()[0].clone();
        assert_eq!(
            plugin.optimized(),
            tiers.is_none(),
            "the case must run on the code it is meant to"
        );
        let tool = format!(
            "{}_{}",
            case.plugin.replace('-', "_"),
            case.tool
                .as_deref()
                .expect("a case that calls needs a `tool`")
        );
        let args = expand_json(
            serde_json::to_value(&case.args).expect("arguments as JSON"),
            &fixture,
            ports,
        );
        for step in &case.before {
            let tool = format!("{}_{}", case.plugin.replace('-', "_"), step.tool);
            let args = expand_json(
                serde_json::to_value(&step.args).expect("arguments as JSON"),
                &fixture,
                ports,
            );
            let _ = try_call(&plugin, &tool, args).await;
        }
        let logged_before = plugin.logged_bytes();
        match &case.burst {
            None => {
                let rss_before = reset_peak_rss();
                let watcher = case.expect.host_keeps_fds.then(FdWatcher::start);
                let started = Instant::now();
                let outcome = try_call(&plugin, &tool, args).await;
                let elapsed = started.elapsed();
                if let Some(failure) = watcher.and_then(FdWatcher::stop) {
                    problems.push(format!(
                        "the host could not open a file while the call ran: {failure}"
                    ));
                }
                problems.extend(check(&case.expect, &outcome));
                if let Some(ms) = case.expect.within_ms
                    && elapsed > Duration::from_millis(ms)
                {
                    problems.push(format!(
                        "the call took {elapsed:?}, more than the {ms} ms allowed"
                    ));
                }
                problems.extend(growth_problem(
                    case.expect.max_host_growth_mb,
                    rss_before,
                    "the call",
                ));
            }
            Some(burst) => problems.extend(run_burst(&plugin, &tool, args, case, burst).await),
        }
        let logged = (plugin.logged_bytes() - logged_before) >> 10;
        if let Some(kb) = case.expect.max_log_kb
            && logged > kb
        {
            problems.push(format!(
                "moat logged {logged} KiB for the plugin during the call, more than the {kb} KiB \
                 allowed"
            ));
        }
        plugin
    };

    let after = fixture.snapshot(&writable);
    if before != after {
        let changed: Vec<String> = before
            .keys()
            .chain(after.keys())
            .filter(|p| before.get(*p) != after.get(*p))
            .map(|p| {
                format!(
                    "{}: {:?} → {:?}",
                    p.strip_prefix(&fixture.root).unwrap_or(p).display(),
                    before.get(p),
                    after.get(p)
                )
            })
            .collect();
        problems.push(format!(
            "ESCAPE: files outside the writable grants changed: {changed:?}"
        ));
    }
    let intruders = listeners.intruders();
    if !intruders.is_empty() {
        problems.push(format!(
            "ESCAPE: connections reached the runner's listeners from {intruders:?}"
        ));
    }
    // The same plugin, right after the attack, must still work.
    let ok_tool = format!("{}_ok", plugin.name);
    let after_call = try_call(&plugin, &ok_tool, serde_json::json!({})).await;
    let answered = after_call.as_ref().is_ok_and(|r| {
        r.is_error != Some(true)
            && r.content
                .first()
                .and_then(|c| c.as_text())
                .is_some_and(|t| t.text == "ok")
    });
    if !answered {
        problems.push(format!(
            "the plugin no longer answers after the attack: {}",
            brief(&after_call)
        ));
    }
    problems
}

/// Starts `burst.calls` calls at once; `burst.succeed` of them must succeed and the rest fail
/// as the case expects.
async fn run_burst(
    plugin: &Arc<Plugin>,
    tool: &str,
    args: Value,
    case: &Case,
    burst: &Burst,
) -> Vec<String> {
    let watcher = case.expect.host_keeps_fds.then(FdWatcher::start);
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..burst.calls {
        let plugin = plugin.clone();
        let tool = tool.to_string();
        let args = args.clone();
        calls.spawn(async move { try_call(&plugin, &tool, args).await });
    }
    let outcomes = calls.join_all().await;
    let mut problems = Vec::new();
    if let Some(failure) = watcher.and_then(FdWatcher::stop) {
        problems.push(format!(
            "the host could not open a file while the calls ran: {failure}"
        ));
    }
    let mut succeeded = 0;
    for outcome in &outcomes {
        match outcome {
            Ok(result) if result.is_error != Some(true) => {
                succeeded += 1;
                problems.extend(leaks(&case.expect, &outcome_text(outcome)));
            }
            _ => problems.extend(check(&case.expect, outcome)),
        }
    }
    if succeeded != burst.succeed {
        problems.push(format!(
            "{succeeded} of {} calls succeeded, expected {}",
            burst.calls, burst.succeed
        ));
    }
    problems.sort();
    problems.dedup();
    problems
}

/// Opens /dev/null again and again on a thread of its own while a call runs, and remembers the
/// first failure.
struct FdWatcher {
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<Option<String>>,
}

impl FdWatcher {
    fn start() -> Self {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                if let Err(e) = std::fs::File::open("/dev/null") {
                    return Some(e.to_string());
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            None
        });
        Self { stop, thread }
    }

    fn stop(self) -> Option<String> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.join().expect("the watcher does not panic")
    }
}

/// How much more than `max_mb` the host's memory grew during `what`, if it did. A bound that
/// cannot be measured is a problem too, not a pass: the case would prove nothing.
fn growth_problem(max_mb: Option<u64>, before: Result<u64, String>, what: &str) -> Option<String> {
    let mb = max_mb?;
    let (before, peak) = match before.and_then(|before| Ok((before, peak_rss()?))) {
        Ok(measured) => measured,
        Err(e) => {
            return Some(format!(
                "the host's memory growth during {what} must stay under {mb} MiB, but it cannot \
                 be measured: {e}"
            ));
        }
    };
    let growth = peak.saturating_sub(before) >> 20;
    (growth > mb).then(|| {
        format!(
            "the host's memory grew by {growth} MiB during {what}, more than the {mb} MiB allowed"
        )
    })
}

/// Resets the process's peak resident memory (Linux's `VmHWM`) and returns the current resident
/// memory, in bytes; or why that cannot be done.
fn reset_peak_rss() -> Result<u64, String> {
    std::fs::write("/proc/self/clear_refs", "5")
        .map_err(|e| format!("resetting the peak through /proc/self/clear_refs failed: {e}"))?;
    let (rss, peak) = (proc_status_bytes("VmRSS:")?, peak_rss()?);
    // A kernel that takes the write but keeps the old peak would blame the call for it.
    if peak > rss + (16 << 20) {
        return Err(format!(
            "/proc/self/clear_refs did not reset the peak ({} MiB, while {} MiB are resident)",
            peak >> 20,
            rss >> 20
        ));
    }
    Ok(rss)
}

/// The process's peak resident memory since [`reset_peak_rss`], in bytes.
fn peak_rss() -> Result<u64, String> {
    proc_status_bytes("VmHWM:")
}

fn proc_status_bytes(field: &str) -> Result<u64, String> {
    let status = std::fs::read_to_string("/proc/self/status")
        .map_err(|e| format!("reading /proc/self/status failed: {e}"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|kib| kib.trim().strip_suffix("kB")?.trim().parse::<u64>().ok())
        .map(|kib| kib << 10)
        .ok_or_else(|| format!("no {field} in kB in /proc/self/status"))
}

fn expand_toml(value: toml::Value, fixture: &Fixture, ports: Ports) -> toml::Value {
    match value {
        toml::Value::String(s) => toml::Value::String(fixture.expand(&s, ports)),
        toml::Value::Array(items) => items
            .into_iter()
            .map(|v| expand_toml(v, fixture, ports))
            .collect::<Vec<_>>()
            .into(),
        toml::Value::Table(table) => toml::Value::Table(
            table
                .into_iter()
                .map(|(k, v)| (k, expand_toml(v, fixture, ports)))
                .collect(),
        ),
        other => other,
    }
}

fn expand_json(value: Value, fixture: &Fixture, ports: Ports) -> Value {
    match value {
        Value::String(s) => Value::String(fixture.expand(&s, ports)),
        Value::Array(items) => Value::Array(
            items
                .into_iter()
                .map(|v| expand_json(v, fixture, ports))
                .collect(),
        ),
        Value::Object(object) => Value::Object(
            object
                .into_iter()
                .map(|(k, v)| (k, expand_json(v, fixture, ports)))
                .collect(),
        ),
        other => other,
    }
}

fn read_case(name: &str) -> Result<Case, String> {
    let path = cases_dir().join(name).join("case.toml");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Puts a variable in moat's own environment, once, for the cases that look for it.
fn set_host_env() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: other tests may be running on other threads, but they (and the libraries they
        // use) read the environment through std, which serialises access with this write.
        unsafe { std::env::set_var(HOST_ENV_NAME, HOST_ENV_VALUE) };
    });
    assert_eq!(
        std::env::var(HOST_ENV_NAME).as_deref(),
        Ok(HOST_ENV_VALUE),
        "moat's own environment must hold the variable no plugin may see"
    );
}

/// On Cranelift's code, then on Winch's: a plugin seen for the first time runs Winch's until
/// Cranelift's is ready (see `moat::plugin::tiers`), so every attack must fail on both. One
/// after the other, since the cases share their fixtures and the process's descriptors.
#[tokio::test]
async fn every_attack_fails_and_the_plugin_survives() {
    let cranelift = run_suite(None).await;
    let winch = run_suite(Some(baseline_tiers())).await;
    assert!(
        cranelift.is_empty() && winch.is_empty(),
        "hostile case problems on Cranelift's code ({}):\n  {}\non Winch's code ({}):\n  {}",
        cranelift.len(),
        cranelift.join("\n  "),
        winch.len(),
        winch.join("\n  ")
    );
}

/// Runs every case on the code `tiers` make (Cranelift's without); the problems found.
async fn run_suite(tiers: Option<&Tiers>) -> Vec<String> {
    set_host_env();
    let listeners = Listeners::new();
    let http =
        crate::loopback::Server::start(|seen| match seen.uri.strip_prefix("/redirect?to=") {
            Some(to) => crate::loopback::redirect(to),
            // A server that reflects what it got, as TRACE does: whatever moat should not have
            // sent comes back to the guest, and the leak checks see it.
            None if seen.uri == "/echo-headers" => {
                crate::loopback::respond(200, "text/plain", echo_headers(seen))
            }
            None if seen.uri.starts_with("/echo-encoded") => echo_encoded(seen),
            None => crate::loopback::respond(200, "text/plain", "hello from the runner"),
        })
        .await;
    let run_gaps = std::env::var_os("MOAT_HOSTILE_RUN_GAPS").is_some();
    let mut failures = Vec::new();
    let mut gaps = Vec::new();
    // `MOAT_HOSTILE_CASE=name` runs that one case only.
    let only = std::env::var("MOAT_HOSTILE_CASE").ok();
    for name in case_names() {
        if only.as_ref().is_some_and(|only| *only != name) {
            continue;
        }
        let case = match read_case(&name) {
            Ok(case) => case,
            Err(e) => {
                failures.push(format!("{name}: unreadable case: {e}"));
                continue;
            }
        };
        if let Some(gap) = &case.known_gap {
            gaps.push(format!("{name}: {gap}"));
            if !run_gaps {
                println!(
                    "hostile case {name}: KNOWN GAP, skipped ({})",
                    case.description
                );
                continue;
            }
        }
        let started = Instant::now();
        let problems = run_case(&name, &case, &listeners, &http, tiers).await;
        let verdict = if problems.is_empty() {
            "held"
        } else {
            "FAILED"
        };
        let code = if tiers.is_some() {
            "Winch"
        } else {
            "Cranelift"
        };
        println!(
            "hostile case {name} on {code}'s code: {verdict} in {:?} ({})",
            started.elapsed(),
            case.description
        );
        for problem in problems {
            failures.push(format!("{name}: {problem}"));
        }
    }
    if !gaps.is_empty() {
        println!("known gaps:\n  {}", gaps.join("\n  "));
    }
    failures
}

/// The request's headers, one `name: value` a line.
/// The request's `Authorization`, as a careless server's error page might quote it: encoded
/// (`x-reversed`) when the request accepts that, or always at `/echo-encoded-always`, and cut to
/// the `Range` the request names (`bytes=N-` only).
fn echo_encoded(seen: &crate::loopback::Seen) -> axum::response::Response {
    let header = |name: &str| {
        seen.headers
            .get(name)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
    };
    let mut body = header("authorization").unwrap_or_default().into_bytes();
    let accepted = header("accept-encoding").is_some_and(|a| a.contains("x-reversed"));
    let encoded = accepted || seen.uri == "/echo-encoded-always";
    if encoded {
        body.reverse();
    }
    let mut response = axum::http::Response::builder().header("content-type", "text/plain");
    if encoded {
        response = response.header("content-encoding", "x-reversed");
    }
    let from = header("range")
        .and_then(|r| {
            r.strip_prefix("bytes=")?
                .strip_suffix('-')?
                .parse::<usize>()
                .ok()
        })
        .filter(|from| *from < body.len());
    if let Some(from) = from {
        let range = format!("bytes {from}-{}/{}", body.len() - 1, body.len());
        body.drain(..from);
        response = response.status(206).header("content-range", range);
    }
    response.body(axum::body::Body::from(body)).unwrap()
}

fn echo_headers(seen: &crate::loopback::Seen) -> String {
    seen.headers
        .iter()
        .map(|(name, value)| format!("{name}: {}\n", String::from_utf8_lossy(value.as_bytes())))
        .collect()
}

#[test]
fn the_suite_has_enough_cases() {
    let names = case_names();
    assert!(
        names.len() >= MIN_CASES,
        "only {} case folders in tests/hostile: {names:?}",
        names.len()
    );
    for name in &names {
        if let Err(e) = read_case(name) {
            panic!("{e}");
        }
    }
}

/// Every case's `moat.toml` fits `moat.schema.json`, as an editor would check it.
#[test]
fn every_case_config_fits_the_schema() {
    let ports = Ports {
        port: 1,
        port6: 2,
        http_port: 3,
    };
    for name in case_names() {
        let case = read_case(&name).unwrap_or_else(|e| panic!("{e}"));
        let fixture = Fixture::new(&format!("schema-{name}"), &case.symlinks, ports);
        let path = case.write_config(&fixture, ports);
        let text = std::fs::read_to_string(&path).unwrap();
        crate::schema::assert_fits(&text, &format!("the moat.toml of case {name}"));
    }
}
