//! moat.toml mistakes as golden files: each `tests/config/invalid/NAME.toml` beside
//! `NAME.expected`, the message moat prints for it (after `moat: `), its folder's path left out,
//! so that a message that changes shows in review. `UPDATE_GOLDEN=1` writes the messages moat
//! gives now in their place.

use std::path::{Path, PathBuf};

#[test]
fn every_invalid_config_fails_with_its_message() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/invalid");
    // A secrets file must be private, and git keeps no mode but the executable bit.
    set_private(&dir.join("shared.secrets"));
    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    let configs = files(&dir, "toml");
    assert!(configs.len() >= 12, "only {} configs", configs.len());
    let mut wrong = Vec::new();
    for config in &configs {
        let got = match moat::serve::config::load(config, None) {
            Ok(_) => "(read without an error)".to_string(),
            Err(error) => without_folder(&format!("{error:#}"), &dir),
        };
        let golden = config.with_extension("expected");
        if update {
            std::fs::write(&golden, format!("{got}\n")).unwrap();
            continue;
        }
        let expected = std::fs::read_to_string(&golden).unwrap_or_default();
        if expected != format!("{got}\n") {
            wrong.push(format!(
                "{}:\n  expected: {}\n  moat says: {got}",
                config.display(),
                expected.trim_end()
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} messages differ (UPDATE_GOLDEN=1 rewrites them, for review):\n{}",
        wrong.len(),
        configs.len(),
        wrong.join("\n")
    );
    // A golden file whose config is gone would never be checked.
    for golden in files(&dir, "expected") {
        assert!(
            golden.with_extension("toml").exists(),
            "{} has no config",
            golden.display()
        );
    }
}

/// The files of `dir` that end in `.EXTENSION`, in order.
fn files(dir: &Path, extension: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == extension))
        .collect();
    files.sort();
    files
}

/// `message` with `dir` (as given, and with its links resolved) left out of every path in it.
fn without_folder(message: &str, dir: &Path) -> String {
    let canonical = dir.canonicalize().unwrap();
    [canonical.as_path(), dir]
        .iter()
        .fold(message.to_string(), |message, dir| {
            message.replace(&format!("{}/", dir.display()), "")
        })
}

fn set_private(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}
