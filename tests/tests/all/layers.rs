//! The layers of `runtime/src` (ARCHITECTURE.md): each folder uses only the layers below it, so
//! an arrow between layers never points up and no circle can form between them.

use std::path::{Path, PathBuf};

/// The layers from the bottom up; `memory` and `parallel` are leaves every layer may use.
const LAYERS: &[&str] = &[
    "memory", "parallel", "wit", "sandbox", "supply", "plugin", "shared", "cluster", "access",
    "upstream", "policy", "mcp", "serve", "console",
];

fn runtime_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../runtime/src")
}

fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir)
        .expect("reading runtime/src")
        .flatten()
    {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

/// The crate modules that `code`, the file at `module` (its module path, e.g. `["sandbox",
/// "network", "grant"]`), names as `crate::NAME` or by enough `super::` to reach the crate root;
/// comments left out. An inline `mod NAME {` (such as a file's tests, at its end) counts as one
/// level deeper for the rest of the file.
fn crate_paths(code: &str, module: &[String]) -> Vec<String> {
    let mut names = Vec::new();
    let mut depth = module.len();
    for line in code.lines() {
        let line = line.split("//").next().unwrap_or("");
        let trimmed = line.trim();
        if trimmed.starts_with("mod ") && trimmed.ends_with('{') {
            depth += 1;
        }
        let mut rest = line;
        while let Some(at) = rest
            .find("crate::")
            .into_iter()
            .chain(rest.find("super::"))
            .min()
        {
            rest = &rest[at..];
            let mut ups = 0;
            let root = if let Some(after) = rest.strip_prefix("crate::") {
                rest = after;
                true
            } else {
                while let Some(after) = rest.strip_prefix("super::") {
                    rest = after;
                    ups += 1;
                }
                ups >= depth
            };
            if root {
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                names.push(name);
            }
        }
    }
    names
}

/// A file's module path below the crate root.
fn module_path(relative: &Path) -> Vec<String> {
    let mut parts: Vec<String> = relative
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

/// Every place a file of one layer names a layer above its own, or a module that is no layer.
fn violations(src: &Path) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    let mut found = Vec::new();
    for file in &files {
        let relative = file.strip_prefix(src).unwrap();
        let first = relative.components().next().unwrap().as_os_str();
        let layer = first.to_string_lossy().trim_end_matches(".rs").to_string();
        // The binary (main.rs, cli/) and the crate root sit above every layer.
        if matches!(layer.as_str(), "main" | "lib" | "cli") {
            continue;
        }
        let Some(own) = LAYERS.iter().position(|l| *l == layer) else {
            found.push(format!("{} is in no layer", relative.display()));
            continue;
        };
        let code = std::fs::read_to_string(file).unwrap();
        for name in crate_paths(&code, &module_path(relative)) {
            match LAYERS.iter().position(|l| *l == name) {
                None => found.push(format!(
                    "{} names crate::{name}, which is no layer",
                    relative.display()
                )),
                Some(used) if used > own || own == 0 => found.push(format!(
                    "{} ({layer}) uses crate::{name}, a layer above it",
                    relative.display()
                )),
                Some(_) => {}
            }
        }
    }
    found
}

#[test]
fn every_layer_uses_only_the_layers_below_it() {
    let found = violations(&runtime_src());
    assert!(
        found.is_empty(),
        "arrows pointing up:\n{}",
        found.join("\n")
    );
}

#[test]
fn an_arrow_pointing_up_is_found() {
    // The check itself: a sandbox file that reaches for the plugin layer is reported.
    let dir = moat_tests::TempDir::new("layers");
    std::fs::create_dir_all(dir.join("sandbox")).unwrap();
    std::fs::write(
        dir.join("sandbox/host.rs"),
        "// crate::serve in a comment is no use\nuse crate::plugin::Plugin;\nuse crate::wit::values;\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("sandbox/mod.rs"),
        "use super::mcp::server;\nmod host;\n",
    )
    .unwrap();
    let found = violations(&dir);
    assert_eq!(
        found,
        [
            "sandbox/host.rs (sandbox) uses crate::plugin, a layer above it",
            "sandbox/mod.rs (sandbox) uses crate::mcp, a layer above it",
        ]
    );
}
