//! What the guest SDK's build script puts into a Rust plugin, put into a component built any
//! other way (componentize-js, componentize-py, Go, C#…): its WIT package, doc comments and all,
//! as the `moat:wit` custom section, and its permission manifest as `moat:manifest`. The usual
//! component build drops doc comments; with them back, its tools get their descriptions.

use std::ops::Range;
use std::path::Path;

use anyhow::{Context, Result, bail};
use wasm_encoder::{CustomSection, Encode};
use wasmparser::{Encoding, Parser, Payload};

use crate::supply::manifest::{MANIFEST_SECTION, Manifest};
use crate::wit::docs::WIT_SECTION;

/// `wasm` with `wit` (an encoded WIT package) and `manifest` (if any) as its top-level
/// `moat:wit` and `moat:manifest` sections, in place of any it had there.
pub fn embed(wasm: &[u8], wit: &[u8], manifest: Option<&Manifest>) -> Result<Vec<u8>> {
    let mut kept: Vec<Range<usize>> = Vec::new();
    let mut end_of_kept = 0;
    let mut seen_version = false;
    for payload in Parser::new(0).parse_all(wasm) {
        let payload = payload.context("the file is not a valid WebAssembly component")?;
        match &payload {
            Payload::Version { encoding, .. } if !seen_version => {
                if *encoding != Encoding::Component {
                    bail!("the file is a core module, not a component");
                }
                seen_version = true;
                kept.push(0..8);
                end_of_kept = 8;
                continue;
            }
            Payload::CustomSection(section)
                if [WIT_SECTION, MANIFEST_SECTION].contains(&section.name())
                    && section.range().start < end_of_kept =>
            {
                bail!(
                    "a module inside the component carries a `{}` section already (the guest \
                     SDK's build writes one); rebuild it without, or leave it as it is",
                    section.name()
                );
            }
            _ => {}
        }
        let Some((id, range)) = payload.as_section() else {
            continue;
        };
        // The header of a section: its id and size before `range`.
        let start = section_start(wasm, id, &range);
        if start < end_of_kept {
            continue; // inside a nested module or component, copied with it
        }
        let ours = matches!(&payload, Payload::CustomSection(s)
            if [WIT_SECTION, MANIFEST_SECTION].contains(&s.name()));
        if !ours {
            kept.push(start..range.end);
        }
        end_of_kept = range.end;
    }
    let mut out: Vec<u8> = kept.into_iter().flat_map(|r| wasm[r].to_vec()).collect();
    let mut section = |name: &str, data: &[u8]| {
        out.push(0); // a custom section
        CustomSection {
            name: name.into(),
            data: data.into(),
        }
        .encode(&mut out);
    };
    section(WIT_SECTION, wit);
    if let Some(manifest) = manifest {
        section(
            MANIFEST_SECTION,
            serde_json::to_string(manifest)?.as_bytes(),
        );
    }
    Ok(out)
}

/// Where the section whose contents are `range` begins: its id byte, then its size as LEB128.
fn section_start(wasm: &[u8], id: u8, range: &Range<usize>) -> usize {
    let mut size = Vec::new();
    range.len().encode(&mut size);
    let start = range.start - size.len() - 1;
    debug_assert_eq!(wasm[start], id);
    start
}

/// Encodes the WIT package in the folder `dir` (with its `deps/`), doc comments included.
pub fn encode_wit(dir: &Path) -> Result<Vec<u8>> {
    let mut resolve = wit_parser::Resolve::default();
    let (package, _) = resolve
        .push_dir(dir)
        .with_context(|| format!("reading the WIT in {}", dir.display()))?;
    wit_component::encode(&resolve, package).context("encoding the WIT package")
}

/// The permission manifest in `path`: a `moat-plugin.toml` (its keys at the top), a
/// `package.json` (its `moat` object), a `pyproject.toml` (its `[tool.moat]` table) or a
/// `Cargo.toml` (its `[package.metadata.moat]` table); `None` when the file has no such table.
pub fn read_manifest(path: &Path) -> Result<Option<Manifest>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let file = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    let value: Option<serde_json::Value> = match file {
        "package.json" => {
            let json: serde_json::Value = serde_json::from_str(&text)
                .with_context(|| format!("{} is not JSON", path.display()))?;
            json.get("moat").cloned()
        }
        _ => {
            let toml: toml::Table =
                toml::from_str(&text).with_context(|| format!("in {}", path.display()))?;
            let table = match file {
                "pyproject.toml" => toml.get("tool").and_then(|t| t.get("moat")).cloned(),
                "Cargo.toml" => toml
                    .get("package")
                    .and_then(|p| p.get("metadata"))
                    .and_then(|m| m.get("moat"))
                    .cloned(),
                _ => Some(toml::Value::Table(toml)),
            };
            table.map(serde_json::to_value).transpose()?
        }
    };
    let Some(value) = value else {
        return Ok(None);
    };
    let manifest: Manifest = serde_json::from_value(value)
        .with_context(|| format!("the permission manifest in {}", path.display()))?;
    if let Some(dir) = manifest.files.iter().find(|d| !d.guest.starts_with('/')) {
        bail!(
            "the permission manifest in {}: guest path \"{}\" must be absolute",
            path.display(),
            dir.guest
        );
    }
    Ok(Some(manifest))
}

#[cfg(test)]
mod tests {
    use super::read_manifest;

    #[test]
    fn a_manifest_is_read_from_each_languages_metadata() {
        let dir = std::env::temp_dir().join(format!("moat-embed-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let files = [
            ("moat-plugin.toml", "env = [\"LANG\"]\n"),
            (
                "package.json",
                r#"{"name": "x", "moat": {"env": ["LANG"]}}"#,
            ),
            (
                "pyproject.toml",
                "[project]\nname = \"x\"\n[tool.moat]\nenv = [\"LANG\"]\n",
            ),
            (
                "Cargo.toml",
                "[package]\nname = \"x\"\n[package.metadata.moat]\nenv = [\"LANG\"]\n",
            ),
        ];
        for (name, text) in files {
            let path = dir.join(name);
            std::fs::write(&path, text).unwrap();
            let manifest = read_manifest(&path).unwrap().unwrap();
            assert_eq!(manifest.env, ["LANG"], "{name}");
        }
        std::fs::write(dir.join("package.json"), r#"{"name": "x"}"#).unwrap();
        assert!(read_manifest(&dir.join("package.json")).unwrap().is_none());
        let bad = dir.join("moat-plugin.toml");
        std::fs::write(&bad, "files = [{ guest = \"notes\", mode = \"rw\" }]\n").unwrap();
        let error = read_manifest(&bad).unwrap_err().to_string();
        assert!(error.contains("must be absolute"), "{error}");
        std::fs::write(&bad, "envs = [\"LANG\"]\n").unwrap();
        let error = format!("{:#}", read_manifest(&bad).unwrap_err());
        assert!(error.contains("unknown field `envs`"), "{error}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
