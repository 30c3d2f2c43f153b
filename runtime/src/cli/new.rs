//! `moat new`: a plugin project in Python, JavaScript or TypeScript that `moat build` makes into a
//! component: its WIT (with the docs tools are described by), its code, a test that calls it
//! through moat, and its permission manifest in the language's own metadata file.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};

/// The languages `moat new` makes projects in.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Lang {
    Python,
    Javascript,
    Typescript,
}

/// Each file of a project: its path (`{{name}}` replaced) and its text.
fn files(lang: Lang) -> &'static [(&'static str, &'static str)] {
    const WIT: &str = include_str!("templates/plugin.wit");
    const PLUGIN_WIT: (&str, &str) = (
        "wit/deps/moat-plugin/plugin.wit",
        include_str!("../../../wit/plugin.wit"),
    );
    match lang {
        Lang::Python => &[
            ("wit/{{name}}.wit", WIT),
            PLUGIN_WIT,
            ("app.py", include_str!("templates/python/app.py")),
            (
                "pyproject.toml",
                include_str!("templates/python/pyproject.toml"),
            ),
            (
                "test_plugin.py",
                include_str!("templates/python/test_plugin.py"),
            ),
            (".gitignore", include_str!("templates/python/gitignore")),
        ],
        Lang::Javascript => &[
            ("wit/{{name}}.wit", WIT),
            PLUGIN_WIT,
            ("plugin.js", include_str!("templates/javascript/plugin.js")),
            ("build.mjs", include_str!("templates/javascript/build.mjs")),
            (
                "package.json",
                include_str!("templates/javascript/package.json"),
            ),
            (
                "plugin.test.js",
                include_str!("templates/javascript/plugin.test.js"),
            ),
            (".gitignore", include_str!("templates/javascript/gitignore")),
        ],
        Lang::Typescript => &[
            ("wit/{{name}}.wit", WIT),
            PLUGIN_WIT,
            ("plugin.ts", include_str!("templates/typescript/plugin.ts")),
            ("build.mjs", include_str!("templates/typescript/build.mjs")),
            (
                "package.json",
                include_str!("templates/typescript/package.json"),
            ),
            (
                "tsconfig.json",
                include_str!("templates/typescript/tsconfig.json"),
            ),
            (
                "plugin.test.js",
                include_str!("templates/typescript/plugin.test.js"),
            ),
            (".gitignore", include_str!("templates/typescript/gitignore")),
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
        Lang::Python => "`pip install componentize-py==0.25.1` once, then ",
        Lang::Javascript | Lang::Typescript => "`npm install` once, then ",
    };
    eprintln!(
        "moat: made {}; {first}`moat build` there, and `moat serve build/{name}.wasm`",
        dir.display()
    );
    Ok(ExitCode::SUCCESS)
}
