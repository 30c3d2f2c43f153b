//! One test binary for everything: fewer link steps on small machines.

mod auth;
mod burn;
mod cache;
mod cedar;
mod chatty;
mod config_errors;
mod conformance;
mod console;
mod echo;
mod fetch;
mod filesystem;
mod foreign;
mod fuel;
mod fuzz_corpora;
mod handmade;
mod health;
mod hostile;
mod instances;
mod layers;
mod loopback;
mod memory;
mod naming;
mod network;
mod notebook;
mod reload;
mod schema;
mod shapes;
mod sources;
mod tasks;
mod text;
mod tiers;
mod time;
mod toolchains;
mod trust;
mod views;
mod weather;

/// Every plugin crate is used by some test (wasmtime's `assert_test_exists`, by another route):
/// a test module's code, not a comment or a string in it, names its path constant,
/// `plugins::NAME`.
#[test]
fn every_plugin_has_a_test() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/all");
    let code: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| code_of(&std::fs::read_to_string(entry.unwrap().path()).unwrap()))
        .collect();
    let untested: Vec<&str> = moat_tests::plugins::ALL
        .iter()
        .copied()
        .filter(|name| {
            let constant = name.to_uppercase().replace('-', "_");
            !code.iter().any(|code| names_constant(code, &constant))
        })
        .collect();
    assert!(untested.is_empty(), "plugins without a test: {untested:?}");
}

/// Whether `code` holds `plugins::CONSTANT` as a whole path (not `plugins::CONSTANT_TWO`).
fn names_constant(code: &str, constant: &str) -> bool {
    let path = format!("plugins::{constant}");
    code.match_indices(&path).any(|(at, _)| {
        !code[at + path.len()..].starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// Rust source with its comments and its string and character literals blanked out.
fn code_of(source: &str) -> String {
    let chars: Vec<char> = source.chars().collect();
    let mut code = String::with_capacity(source.len());
    let mut i = 0;
    // Blanks `chars[from..to]`, keeping line breaks.
    let blank = |code: &mut String, from: usize, to: usize| {
        code.extend(
            chars[from..to]
                .iter()
                .map(|&c| if c == '\n' { c } else { ' ' }),
        );
    };
    let ident = |i: usize| i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_');
    while i < chars.len() {
        let next = chars.get(i + 1).copied();
        let end = match (chars[i], next) {
            ('/', Some('/')) => (i..chars.len())
                .find(|&j| chars[j] == '\n')
                .unwrap_or(chars.len()),
            ('/', Some('*')) => {
                let (mut depth, mut j) = (0, i);
                while j < chars.len() {
                    match (chars[j], chars.get(j + 1)) {
                        ('/', Some('*')) => (depth, j) = (depth + 1, j + 2),
                        ('*', Some('/')) => (depth, j) = (depth - 1, j + 2),
                        _ => j += 1,
                    }
                    if depth == 0 {
                        break;
                    }
                }
                j.min(chars.len())
            }
            // r"…", r#"…"#, br"…": no escapes, ended by the quote and as many `#`.
            ('r', Some('"' | '#')) if !ident(i) || (chars[i - 1] == 'b' && !ident(i - 1)) => {
                let hashes = chars[i + 1..].iter().take_while(|&&c| c == '#').count();
                if chars.get(i + 1 + hashes) != Some(&'"') {
                    code.push(chars[i]);
                    i += 1;
                    continue;
                }
                let close: String = std::iter::once('"')
                    .chain("#".repeat(hashes).chars())
                    .collect();
                let body: String = chars[i + 2 + hashes..].iter().collect();
                body.find(&close).map_or(chars.len(), |at| {
                    i + 2 + hashes + body[..at].chars().count() + close.len()
                })
            }
            ('"', _) => {
                let mut j = i + 1;
                while j < chars.len() && chars[j] != '"' {
                    j += if chars[j] == '\\' { 2 } else { 1 };
                }
                (j + 1).min(chars.len())
            }
            // 'x' and '\n' are characters; 'a in `&'a str` is a lifetime, kept.
            ('\'', Some('\\')) => (i + 3..chars.len())
                .find(|&j| chars[j] == '\'')
                .map_or(chars.len(), |j| j + 1),
            ('\'', Some(_)) if chars.get(i + 2) == Some(&'\'') => i + 3,
            (c, _) => {
                code.push(c);
                i += 1;
                continue;
            }
        };
        blank(&mut code, i, end);
        i = end;
    }
    code
}

#[test]
fn a_name_in_a_comment_or_a_string_is_no_use() {
    let source = "// plugins::A\n/* plugins::B /* nested */ plugins::B */\n\
                  let s = \"plugins::C \\\" plugins::C\"; let r = r#\"plugins::D \"x\"\"#;\n\
                  let q = ['\"', '\\'', '\\u{22}']; fn f<'a>(x: &'a str) {} plugins::E;\n\
                  plugins::F_TWO; // plugins::F\n";
    let code = code_of(source);
    for unused in ["A", "B", "C", "D", "F"] {
        assert!(!names_constant(&code, unused), "{unused} in {code:?}");
    }
    assert!(names_constant(&code, "E"), "{code:?}");
    assert!(names_constant(&code, "F_TWO"), "{code:?}");
    assert_eq!(code.lines().count(), source.lines().count());
}
