//! `moat build` for an MCP server written with the TypeScript SDK: the project stays as its
//! author wrote it. moat's own toolchain (`ts_sdk/`: esbuild and componentize-js, pinned, with
//! moat's stdio transport and the build script) is installed once in moat's cache folder; its
//! `build.mjs` bundles the server, refuses what cannot work in the sandbox and makes the bundle
//! a component of the world `mcp-server-plugin`.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};

use super::toolchains::{install_beside, npm_install};

/// The toolchain's files, each written under its name.
const FILES: [(&str, &str); 4] = [
    ("package.json", include_str!("ts_sdk/package.json")),
    ("build.mjs", include_str!("ts_sdk/build.mjs")),
    ("transport.mjs", include_str!("ts_sdk/transport.mjs")),
    ("wit/plugin.wit", super::new::MOAT_WIT),
];

/// The packages whose servers moat builds: the SDK's 1.x package and 2.x's server package.
const SDKS: [&str; 2] = ["@modelcontextprotocol/sdk", "@modelcontextprotocol/server"];

/// Whether the project in `dir` is an MCP server written with the TypeScript SDK: its
/// package.json depends on the SDK and it has no WIT of its own (a plugin written for moat's
/// tool interface may use the SDK's types, but declares its tools in `wit/`).
pub fn is_server(dir: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string(dir.join("package.json")) else {
        return false;
    };
    let Ok(package) = serde_json::from_str::<serde_json::Value>(&text) else {
        return false;
    };
    let depends = |sdk: &str| {
        ["dependencies", "devDependencies"]
            .iter()
            .any(|table| package[table].get(sdk).is_some())
    };
    !dir.join("wit").is_dir() && SDKS.iter().any(|sdk| depends(sdk))
}

/// Builds the server in `dir` into `out`; gives the folder of the WIT it was built to, whose
/// docs `moat build` embeds.
pub fn build(dir: &Path, out: &Path) -> Result<PathBuf> {
    if !sdk_installed(dir) {
        eprintln!(
            "moat: the TypeScript SDK is not installed for {}: running `npm install` there",
            dir.display()
        );
        npm_install(dir, false)?;
    }
    let toolchain = toolchain()?;
    let status = Command::new("node")
        .arg(toolchain.join("build.mjs"))
        .arg("--wit")
        .arg(toolchain.join("wit"))
        .arg(dir)
        .arg(out)
        .status()
        .context("running node: install Node.js 20 or later")?;
    if !status.success() {
        // build.mjs said why.
        bail!("the server in {} was not built", dir.display());
    }
    Ok(toolchain.join("wit"))
}

/// Whether the SDK resolves from `dir` as Node resolves it: from `node_modules` here or in a
/// folder above (a workspace's packages share the root's).
fn sdk_installed(dir: &Path) -> bool {
    let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    dir.ancestors().any(|folder| {
        SDKS.iter().any(|sdk| {
            folder
                .join("node_modules")
                .join(sdk)
                .join("package.json")
                .is_file()
        })
    })
}

/// What the component of the project in `dir` is called: its package's name without its scope,
/// else its folder's.
pub fn component_name(dir: &Path) -> String {
    let named = std::fs::read_to_string(dir.join("package.json"))
        .ok()
        .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
        .and_then(|package| package["name"].as_str().map(str::to_string));
    let name = named.unwrap_or_else(|| {
        let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
        dir.file_name()
            .map_or("server".into(), |n| n.to_string_lossy().into_owned())
    });
    let name = name.rsplit('/').next().unwrap_or_default();
    let name: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    if name.is_empty() {
        "server".into()
    } else {
        name
    }
}

/// The toolchain's folder in moat's cache, installed on first use. Its name holds the digest of
/// its files, so a moat with other files gets a folder of its own.
fn toolchain() -> Result<PathBuf> {
    let mut digest = Sha256::new();
    for (name, text) in FILES {
        digest.update(name.as_bytes());
        digest.update(text.as_bytes());
    }
    let digest: String = digest.finalize()[..6]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let folder = super::cache::dir()?
        .join("toolchains")
        .join(format!("ts-sdk-{digest}"));
    if !folder.join("node_modules").is_dir() {
        install(&folder)?;
    }
    Ok(folder)
}

/// Writes the toolchain's files and installs its packages (see [`install_beside`]).
fn install(folder: &Path) -> Result<()> {
    eprintln!(
        "moat: installing the TypeScript SDK toolchain (esbuild, componentize-js; about 60 MB) \
         into {}, which later builds reuse",
        folder.display()
    );
    let installed = |folder: &Path| folder.join("node_modules").is_dir();
    install_beside(
        folder,
        |partial| {
            for (name, text) in FILES {
                let path = partial.join(name);
                std::fs::create_dir_all(path.parent().expect("a folder"))?;
                std::fs::write(&path, text)
                    .with_context(|| format!("writing {}", path.display()))?;
            }
            npm_install(partial, true)
        },
        installed,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A folder of its own for one test, removed when dropped.
    struct Scratch(PathBuf);

    impl Scratch {
        fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn project(package: &str) -> Scratch {
        static MADE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("moat-ts-sdk-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("package.json"), package).unwrap();
        Scratch(dir)
    }

    #[test]
    fn a_project_depending_on_either_sdk_without_wit_is_a_server() {
        let v1 = project(r#"{"dependencies": {"@modelcontextprotocol/sdk": "1.32.2"}}"#);
        assert!(is_server(v1.path()));
        let v2 = project(r#"{"devDependencies": {"@modelcontextprotocol/server": "2.0.0"}}"#);
        assert!(is_server(v2.path()));
        // A plugin for moat's tool interface may use the SDK's types: its WIT says so.
        std::fs::create_dir(v1.path().join("wit")).unwrap();
        assert!(!is_server(v1.path()));
        assert!(!is_server(
            project(r#"{"dependencies": {"zod": "4"}}"#).path()
        ));
        assert!(!is_server(project("not json").path()));
    }

    #[test]
    fn the_sdk_is_found_in_a_folder_above_as_node_finds_it() {
        let root = project("{}");
        let server = root.path().join("servers/one");
        std::fs::create_dir_all(&server).unwrap();
        assert!(!sdk_installed(&server));
        let sdk = root.path().join("node_modules/@modelcontextprotocol/sdk");
        std::fs::create_dir_all(&sdk).unwrap();
        std::fs::write(sdk.join("package.json"), "{}").unwrap();
        assert!(sdk_installed(&server));
    }

    #[test]
    fn the_component_is_named_after_the_package_without_its_scope() {
        let scoped = project(r#"{"name": "@acme/weather.mcp"}"#);
        assert_eq!(component_name(scoped.path()), "weather-mcp");
        // Unnamed, it is named after its folder.
        let root = project("{}");
        let unnamed = root.path().join("my server");
        std::fs::create_dir(&unnamed).unwrap();
        std::fs::write(unnamed.join("package.json"), "{}").unwrap();
        assert_eq!(component_name(&unnamed), "my-server");
    }
}
