//! The operator's files: `moat.toml` (`moat::serve::config::parse`), a policy (`Policy::parse`) and
//! `moat.lock`, each fed the same text.
//!
//! Input: the text; after a NUL byte, optionally, the secrets file's text. The secrets file
//! always ends with a secret of known value: no error may quote it, whatever is wrong with
//! either file.

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::LazyLock;

use moat::supply::lock::Lock;
use moat::supply::policy::{Policy, Transport};
use moat::supply::source::Source;

const SECRET: &str = "fuzz-secret-q7Zk2";

/// A folder for this process: the secrets file, and a `notes` folder for grants to name.
static BASE: LazyLock<PathBuf> = LazyLock::new(|| {
    let base = std::env::temp_dir().join(format!("moat-fuzz-config-{}", std::process::id()));
    std::fs::create_dir_all(base.join("notes")).unwrap();
    base
});

/// Runs one input; panics on a finding.
pub fn check(data: &[u8]) {
    let (text, secrets) = match data.iter().position(|&b| b == 0) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &b""[..]),
    };
    let Ok(text) = std::str::from_utf8(text) else {
        return;
    };
    config(text, secrets);
    policy(text);
    lock(text);
}

fn config(text: &str, secrets: &[u8]) {
    let path = BASE.join("secrets.toml");
    let mut contents = secrets.to_vec();
    contents.extend_from_slice(format!("\nAPI_TOKEN = \"{SECRET}\"\n").as_bytes());
    std::fs::write(&path, contents).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let env = |name: &str| (name != "MISSING").then(|| format!("env-{name}"));
    match moat::serve::config::parse(text, &BASE, &env, Some(&path)) {
        Ok(sources) => {
            for source in sources {
                assert!(!source.name.is_empty());
            }
        }
        Err(error) => {
            let message = format!("{error:#}");
            assert!(!message.trim().is_empty());
            let quoted = secrets
                .windows(SECRET.len())
                .any(|w| w == SECRET.as_bytes());
            if !text.contains(SECRET) && !quoted {
                assert!(
                    !message.contains(SECRET),
                    "an error quotes the secret: {message}"
                );
            }
        }
    }
}

fn policy(text: &str) {
    match Policy::parse(text) {
        Ok(policy) => {
            let local: SocketAddr = "127.0.0.1:8080".parse().unwrap();
            let _ = policy.check_transport(Transport::Stdio, None);
            let _ = policy.check_transport(Transport::Http, Some(local));
        }
        Err(error) => assert!(!format!("{error:#}").trim().is_empty()),
    }
}

/// A lock file that reads writes out as one that reads back the same.
fn lock(text: &str) {
    let Ok(lock) = toml::from_str::<Lock>(text) else {
        return;
    };
    for entry in lock.plugins.values() {
        let _ = Source::parse(&entry.source, &BASE);
    }
    let written = toml::to_string(&lock).expect("a lock file that was read can be written");
    let again: Lock = toml::from_str(&written)
        .unwrap_or_else(|e| panic!("the lock file written does not read back ({e}): {written}"));
    assert_eq!(again.version, lock.version);
    assert_eq!(again.plugins, lock.plugins);
}
