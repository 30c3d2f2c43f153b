//! `moat build`: a plugin project made into a component by its language's own toolchain, then
//! given its WIT docs and permission manifest (see [`super::embed`]): componentize-py for a
//! `pyproject.toml`, componentize-js (after esbuild, for TypeScript) for a `package.json`, cargo for a `Cargo.toml` (whose guest
//! SDK embeds them itself).

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{Context, Result, bail};

/// Builds the project in `dir`.
pub fn run(dir: &Path) -> Result<ExitCode> {
    let has = |file: &str| dir.join(file).is_file();
    if has("Cargo.toml") {
        let mut cargo = Command::new("cargo");
        cargo.args(["build", "--release", "--target", "wasm32-wasip2"]);
        toolchain(
            cargo.current_dir(dir),
            "cargo (rustup target add wasm32-wasip2)",
        )?;
        eprintln!("moat: built under target/wasm32-wasip2/release/");
        return Ok(ExitCode::SUCCESS);
    }
    if !has("pyproject.toml") && !has("package.json") {
        bail!(
            "{} holds no pyproject.toml, package.json or Cargo.toml: no plugin project (`moat new` \
             makes one)",
            dir.display()
        );
    }
    let world = world_name(&dir.join("wit"))?;
    let out = PathBuf::from("build").join(format!("{world}.wasm"));
    let manifest = if has("pyproject.toml") {
        let mut py = Command::new("componentize-py");
        py.args(["-d", "wit", "-w", &world, "componentize", "app", "-o"])
            .arg(&out);
        toolchain(
            py.current_dir(dir),
            "componentize-py (pip install componentize-py==0.25.1)",
        )?;
        "pyproject.toml"
    } else {
        if !dir.join("node_modules").is_dir() {
            bail!(
                "{} has no node_modules: run `npm install` there first",
                dir.display()
            );
        }
        let mut node = Command::new("node");
        node.arg("build.mjs").arg(&out).arg(&world);
        toolchain(node.current_dir(dir), "node")?;
        "package.json"
    };
    let out = dir.join(out);
    // The manifest file may hold no `moat` table: then the component carries none.
    let manifest = dir.join(manifest);
    let manifest = moat::supply::embed::read_manifest(&manifest)?.map(|_| manifest.as_path());
    super::embed::run(&out, &dir.join("wit"), manifest, None)?;
    eprintln!(
        "moat: built {}; try `moat inspect {}`",
        out.display(),
        out.display()
    );
    Ok(ExitCode::SUCCESS)
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
