//! Builds every plugin (the shipped ones in `plugins/` and the test ones in `tests/plugins/`) for
//! `wasm32-wasip2`, once, and exposes their paths to the tests as constants:
//! `plugins/text` becomes `TEXT`, `tests/plugins/shapes` becomes `SHAPES`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::{env, fs};

const TARGET: &str = "wasm32-wasip2";

fn main() {
    let tests_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let root = tests_dir.parent().unwrap().to_path_buf();
    let plugins = plugin_crates(&root);

    for dir in [
        root.join("plugins"),
        tests_dir.join("plugins"),
        root.join("guest-sdk"),
        root.join("wit"),
    ] {
        println!("cargo:rerun-if-changed={}", dir.display());
    }

    // Its own target folder: the outer cargo holds the lock on the usual one.
    let target_dir = root.join("target/wasm-plugins");
    let mut cargo = Command::new(env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cargo
        .current_dir(&root)
        .args(["build", "--release", "--target", TARGET])
        .arg("--target-dir")
        .arg(&target_dir);
    for (name, _) in &plugins {
        cargo.args(["-p", name]);
    }
    // Flags meant for the host build must not reach the wasm one.
    for var in [
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_TARGET",
        "CARGO_TARGET_DIR",
        "CARGO_MAKEFLAGS",
        "MAKEFLAGS",
        "MFLAGS",
    ] {
        cargo.env_remove(var);
    }
    let status = cargo.status().expect("running cargo to build the plugins");
    if !status.success() {
        panic!(
            "building the plugins for {TARGET} failed; if the target is missing, run \
             `rustup target add {TARGET}` (or `./dev test`, which does)"
        );
    }

    let mut constants = String::new();
    for (name, _) in &plugins {
        let wasm = target_dir
            .join(TARGET)
            .join("release")
            .join(format!("{}.wasm", name.replace('-', "_")));
        assert!(wasm.exists(), "{} was not built", wasm.display());
        constants.push_str(&format!(
            "/// The built `{name}` plugin.\npub const {}: &str = {:?};\n",
            name.to_uppercase().replace('-', "_"),
            wasm.display().to_string()
        ));
    }
    let names: Vec<String> = plugins.iter().map(|(n, _)| format!("{n:?}")).collect();
    constants.push_str(&format!(
        "/// Every plugin crate, by package name.\npub const ALL: &[&str] = &[{}];\n",
        names.join(", ")
    ));
    // A new file renamed into place, never a write into the old one: a target folder copied
    // with hard links shares that file's inode with its copies.
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    fs::write(out.join("plugins.rs.new"), constants).unwrap();
    fs::rename(out.join("plugins.rs.new"), out.join("plugins.rs")).unwrap();
}

/// (package name, folder) of every plugin crate.
fn plugin_crates(root: &Path) -> Vec<(String, PathBuf)> {
    let mut crates = Vec::new();
    for parent in [root.join("plugins"), root.join("tests/plugins")] {
        let Ok(entries) = fs::read_dir(&parent) else {
            continue;
        };
        for entry in entries.flatten() {
            let manifest = entry.path().join("Cargo.toml");
            let Ok(text) = fs::read_to_string(&manifest) else {
                continue;
            };
            let name = text
                .lines()
                .find_map(|l| l.strip_prefix("name = \""))
                .and_then(|l| l.strip_suffix('"'))
                .unwrap_or_else(|| panic!("{} has no package name", manifest.display()));
            crates.push((name.to_string(), entry.path()));
        }
    }
    crates.sort();
    crates
}
