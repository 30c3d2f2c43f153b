//! `moat new`: a plugin project in Rust, Python, JavaScript or TypeScript that `moat build` makes
//! into a component: its WIT (with the docs tools are described by), its code, a test that calls it
//! through moat, and its permission manifest in the language's own metadata file; or an MCP
//! server written with the TypeScript SDK, which declares its tools the SDK's way.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};

/// The languages `moat new` makes projects in.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Lang {
    Rust,
    Python,
    Javascript,
    Typescript,
    /// An MCP server written with the official TypeScript SDK, as for any MCP client.
    TypescriptSdk,
}

/// The `moat:plugin` package, where a project's WIT finds it.
pub const MOAT_WIT_PATH: &str = "wit/deps/moat-plugin/plugin.wit";
pub const MOAT_WIT: &str = include_str!("../../../wit/plugin.wit");

/// The TypeScript guest SDK's questions for the client, where a TypeScript project imports them.
pub const TS_CLIENT_PATH: &str = "moat/client.ts";
pub const TS_CLIENT: &str = include_str!("../../../guest-sdk/typescript/client.ts");

/// A template file of `lang`'s folder, written as `path` in the project.
macro_rules! template {
    ($lang:literal, $file:literal) => {
        template!($lang, $file, $file)
    };
    ($lang:literal, $file:literal, $path:literal) => {
        (
            $path,
            include_str!(concat!("templates/", $lang, "/", $file)),
        )
    };
}

/// Each file of a project: its path (`{{name}}` replaced) and its text.
fn files(lang: Lang) -> &'static [(&'static str, &'static str)] {
    const WIT: (&str, &str) = ("wit/{{name}}.wit", include_str!("templates/plugin.wit"));
    const PLUGIN_WIT: (&str, &str) = (MOAT_WIT_PATH, MOAT_WIT);
    // The templates name theirs `gitignore`: git would apply a `.gitignore` to moat's own tree.
    match lang {
        Lang::Rust => &[
            WIT,
            PLUGIN_WIT,
            template!("rust", "lib.rs", "src/lib.rs"),
            template!("rust", "served.rs", "tests/served.rs"),
            // Not named Cargo.toml here: cargo tools would take the template for a crate of moat's.
            template!("rust", "Cargo.toml.in", "Cargo.toml"),
            template!("rust", "gitignore", ".gitignore"),
        ],
        Lang::Python => &[
            WIT,
            PLUGIN_WIT,
            template!("python", "app.py"),
            template!("python", "pyproject.toml"),
            template!("python", "test_plugin.py"),
            template!("python", "gitignore", ".gitignore"),
        ],
        Lang::Javascript => &[
            WIT,
            PLUGIN_WIT,
            template!("javascript", "plugin.js"),
            template!("javascript", "build.mjs"),
            template!("javascript", "package.json"),
            template!("javascript", "plugin.test.js"),
            template!("javascript", "gitignore", ".gitignore"),
        ],
        Lang::Typescript => &[
            WIT,
            PLUGIN_WIT,
            template!("typescript", "plugin.ts"),
            template!("typescript", "build.mjs"),
            template!("typescript", "package.json"),
            template!("typescript", "tsconfig.json"),
            (TS_CLIENT_PATH, TS_CLIENT),
            template!("typescript", "plugin.test.js"),
            template!("typescript", "gitignore", ".gitignore"),
        ],
        // No WIT: the server declares its tools the SDK's way.
        Lang::TypescriptSdk => &[
            template!("typescript-sdk", "server.ts"),
            template!("typescript-sdk", "package.json"),
            template!("typescript-sdk", "tsconfig.json"),
            template!("typescript-sdk", "gitignore", ".gitignore"),
        ],
    }
}

/// Writes a new project for the plugin `name` (a WIT name: `weather`, `my-notes`) in the new
/// folder `dir`.
pub fn run(name: &str, dir: &Path, lang: Lang) -> Result<ExitCode> {
    let is_word = |w: &str| {
        w.starts_with(|c: char| c.is_ascii_lowercase())
            && w.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
    };
    if !name.split('-').all(is_word) {
        bail!(
            "`{name}` is not a plugin name: lowercase words of letters and digits, each starting \
             with a letter, joined by `-` (`weather`, `my-notes`)"
        );
    }
    if dir.exists() {
        bail!(
            "{} exists already; moat new makes a new folder",
            dir.display()
        );
    }
    for (path, text) in files(lang) {
        let path = dir.join(path.replace("{{name}}", name));
        std::fs::create_dir_all(path.parent().expect("a file in the project"))?;
        std::fs::write(&path, text.replace("{{name}}", name))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    let first = match lang {
        Lang::Rust => "`rustup target add wasm32-wasip2` once, then ",
        // `moat build` installs componentize-py when it is missing, and runs `npm install` in
        // a project without node_modules.
        Lang::Python | Lang::Javascript | Lang::Typescript | Lang::TypescriptSdk => "",
    };
    eprintln!(
        "moat: made {}; {first}`moat build` there, and `moat serve build/{name}.wasm`",
        dir.display()
    );
    Ok(ExitCode::SUCCESS)
}
