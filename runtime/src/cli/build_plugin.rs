//! `moat build`: a plugin project made into a component by its language's own toolchain, then
//! given its WIT docs and permission manifest (see [`super::embed`]): cargo for a `Cargo.toml`,
//! componentize-py for a `pyproject.toml` (installed in moat's cache when it is not on `PATH`),
//! componentize-js (after esbuild, for TypeScript) for a
//! `package.json`, or moat's own toolchain for an MCP server written with the TypeScript SDK
//! (see [`super::ts_sdk`]). A Rust plugin built with the guest SDK carries them already and is left as
//! cargo wrote it.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use anyhow::{Context, Result, bail};
use moat::wit::docs::PluginDocs;

/// `moat_plugin`, the Python guest SDK: moat's interfaces in Python's shape.
const PYTHON_SDK: &str = include_str!("../../../guest-sdk/python/moat_plugin.py");

/// Builds the project in `dir`.
pub fn run(dir: &Path) -> Result<ExitCode> {
    let Some(manifest) = ["Cargo.toml", "pyproject.toml", "package.json"]
        .into_iter()
        .find(|file| dir.join(file).is_file())
    else {
        bail!(
            "{} holds no Cargo.toml, pyproject.toml or package.json: no plugin project (`moat \
             new` makes one)",
            dir.display()
        );
    };
    if manifest == "package.json" && super::ts_sdk::is_server(dir) {
        return build_server(dir);
    }
    refresh_moat_files(dir)?;
    let built = (manifest == "Cargo.toml")
        .then(|| cargo_build(dir))
        .transpose()?;
    if let Some(built) = &built {
        let wasm = std::fs::read(built).with_context(|| format!("reading {}", built.display()))?;
        if PluginDocs::from_component(&wasm)?.is_some() {
            eprintln!(
                "moat: built {}, its docs embedded by the guest SDK",
                built.display()
            );
            return Ok(ExitCode::SUCCESS);
        }
    }
    let world = world_name(&dir.join("wit"))?;
    // Relative to `dir`, where the toolchains run.
    let out = PathBuf::from("build").join(format!("{world}.wasm"));
    match manifest {
        "Cargo.toml" => {}
        "pyproject.toml" => {
            // The Python guest SDK, of this moat's version, beside the app (not in it).
            let sdk = Path::new("build").join("python");
            std::fs::create_dir_all(dir.join(&sdk))?;
            std::fs::write(dir.join(&sdk).join("moat_plugin.py"), PYTHON_SDK)?;
            let mut py = super::python_toolchain::componentize_py()?;
            py.args(["-d", "wit", "-w", &world, "componentize", "-p", ".", "-p"])
                .arg(&sdk)
                .args(["app", "-o"])
                .arg(&out);
            toolchain(py.current_dir(dir), "componentize-py")?;
        }
        _ => {
            if !dir.join("node_modules").is_dir() {
                // A fresh project's toolchain, as its package.json pins it: one command fewer.
                eprintln!(
                    "moat: {} has no node_modules: running `npm install` there",
                    dir.display()
                );
                super::toolchains::npm_install(dir, false)?;
            }
            let mut node = Command::new("node");
            node.arg("build.mjs").arg(&out).arg(&world);
            toolchain(node.current_dir(dir), "node")?;
        }
    }
    let out = dir.join(out);
    std::fs::create_dir_all(dir.join("build"))?;
    let component = built.as_deref().unwrap_or(&out);
    embed(component, &dir.join("wit"), &dir.join(manifest), &out)?;
    eprintln!(
        "moat: built {}; try `moat inspect {}`",
        out.display(),
        out.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// Builds an MCP server written with the TypeScript SDK (see [`super::ts_sdk`]), then embeds
/// its permission manifest.
fn build_server(dir: &Path) -> Result<ExitCode> {
    let out = dir
        .join("build")
        .join(format!("{}.wasm", super::ts_sdk::component_name(dir)));
    let wit = super::ts_sdk::build(dir, &out)?;
    embed(&out, &wit, &dir.join("package.json"), &out)?;
    eprintln!(
        "moat: built the MCP server {}; try `moat inspect {}`",
        out.display(),
        out.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// Writes `component` to `out` with the docs of the WIT in `wit` and the permission manifest
/// in `manifest`; a manifest file with no `moat` table gives the component none.
fn embed(component: &Path, wit: &Path, manifest: &Path, out: &Path) -> Result<()> {
    let manifest = moat::supply::embed::read_manifest(manifest)?.map(|_| manifest);
    super::embed::run(component, wit, manifest, Some(out))?;
    Ok(())
}

/// Gives the project this moat's own files: the `moat:plugin` package its WIT may import, and a
/// TypeScript project the guest SDK's `moat/client.ts`.
fn refresh_moat_files(dir: &Path) -> Result<()> {
    use super::new::{MOAT_WIT, MOAT_WIT_PATH, TS_CLIENT, TS_CLIENT_PATH};
    if dir.join("wit").is_dir() {
        refresh(&dir.join(MOAT_WIT_PATH), MOAT_WIT)?;
    }
    if dir.join("tsconfig.json").is_file() {
        refresh(&dir.join(TS_CLIENT_PATH), TS_CLIENT)?;
    }
    Ok(())
}

/// Writes `text` to `path` unless it holds it already.
fn refresh(path: &Path, text: &str) -> Result<()> {
    if std::fs::read_to_string(path).is_ok_and(|t| t == text) {
        return Ok(());
    }
    std::fs::create_dir_all(path.parent().expect("a folder"))?;
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// Builds the crate in `dir` for `wasm32-wasip2`: the component cargo wrote.
fn cargo_build(dir: &Path) -> Result<PathBuf> {
    let output = Command::new("cargo")
        .args(["build", "--release", "--target", "wasm32-wasip2"])
        .arg("--message-format=json-render-diagnostics")
        .current_dir(dir)
        .stderr(Stdio::inherit())
        .output()
        .context("running cargo: install Rust (rustup), then `rustup target add wasm32-wasip2`")?;
    if !output.status.success() {
        bail!(
            "cargo failed ({}); without the target, `rustup target add wasm32-wasip2` adds it",
            output.status
        );
    }
    // cargo's messages, a JSON object a line: the files of each built library.
    let components: Vec<PathBuf> = output
        .stdout
        .split(|&byte| byte == b'\n')
        .filter_map(|line| serde_json::from_slice::<serde_json::Value>(line).ok())
        .filter(|message| {
            message["reason"] == "compiler-artifact"
                && message["target"]["kind"]
                    .as_array()
                    .is_some_and(|kinds| kinds.iter().any(|kind| kind == "cdylib"))
        })
        .flat_map(|message| message["filenames"].as_array().cloned().unwrap_or_default())
        .filter_map(|file| {
            file.as_str()
                .filter(|f| f.ends_with(".wasm"))
                .map(PathBuf::from)
        })
        .collect();
    match components.as_slice() {
        [component] => Ok(component.clone()),
        [] => bail!(
            "cargo built no component: the plugin's Cargo.toml needs `[lib] crate-type = \
             [\"cdylib\"]`"
        ),
        many => bail!(
            "cargo built {} components; run moat build in one plugin's folder",
            many.len()
        ),
    }
}

/// Runs a toolchain's command, or says what to install.
fn toolchain(command: &mut Command, install: &str) -> Result<()> {
    let program = command.get_program().to_string_lossy().into_owned();
    let status = command
        .status()
        .with_context(|| format!("running {program}: install {install}"))?;
    if !status.success() {
        bail!("{program} failed ({status})");
    }
    Ok(())
}

/// The one world of the WIT package in `wit`: the component's shape.
fn world_name(wit: &Path) -> Result<String> {
    let mut resolve = wit_parser::Resolve::default();
    let (package, _) = resolve
        .push_dir(wit)
        .with_context(|| format!("reading the WIT in {}", wit.display()))?;
    let worlds: Vec<&String> = resolve.packages[package].worlds.keys().collect();
    match worlds.as_slice() {
        [world] => Ok(world.to_string()),
        [] => bail!("the WIT in {} has no world", wit.display()),
        many => bail!(
            "the WIT in {} has {} worlds ({}); keep the plugin's one",
            wit.display(),
            many.len(),
            many.iter()
                .map(|w| w.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}
