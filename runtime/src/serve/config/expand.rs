//! `${env:NAME}` and `${secret:NAME}` in values, and the secrets file they are taken from.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// Where `${env:NAME}` and `${secret:NAME}` values come from.
pub(super) struct Lookup<'a> {
    env: &'a dyn Fn(&str) -> Option<String>,
    /// The secrets file's path and its values, when there is one.
    pub(super) secrets: Option<(PathBuf, BTreeMap<String, String>)>,
}

impl<'a> Lookup<'a> {
    /// Lookups in `env` and in the secrets file: `secrets` (a flag's) or else `named` (the
    /// config's own, relative to `base`).
    pub(super) fn new(
        env: &'a dyn Fn(&str) -> Option<String>,
        secrets: Option<&Path>,
        named: Option<&Path>,
        base: &Path,
    ) -> Result<Self> {
        let secrets = match secrets
            .map(Path::to_path_buf)
            .or(named.map(|p| base.join(p)))
        {
            Some(path) => Some((path.clone(), read_secrets(&path)?)),
            None => None,
        };
        Ok(Self { env, secrets })
    }

    /// `text` with every `${env:NAME}` and `${secret:NAME}` replaced by its value.
    pub(super) fn expand(&self, text: &str) -> Result<String> {
        let mut out = String::new();
        let mut rest = text;
        while let Some(start) = rest.find("${") {
            out.push_str(&rest[..start]);
            let end = rest[start..]
                .find('}')
                .with_context(|| format!("`${{` without `}}` in \"{text}\""))?;
            let reference = &rest[start + 2..start + end];
            out.push_str(&self.value(reference)?);
            rest = &rest[start + end + 1..];
        }
        out.push_str(rest);
        Ok(out)
    }

    fn value(&self, reference: &str) -> Result<String> {
        match reference.split_once(':') {
            Some(("env", name)) => {
                (self.env)(name).with_context(|| format!("moat's environment has no {name}"))
            }
            Some(("secret", name)) => {
                let (path, secrets) = self.secrets.as_ref().with_context(|| {
                    format!(
                        "${{secret:{name}}} needs a secrets file: set `secrets = \"…\"` in \
                         moat.toml or pass --secrets"
                    )
                })?;
                secrets
                    .get(name)
                    .cloned()
                    .with_context(|| format!("the secrets file {} has no {name}", path.display()))
            }
            _ => bail!("`${{{reference}}}` is neither ${{env:NAME}} nor ${{secret:NAME}}"),
        }
    }
}

/// Reads a secrets file: a TOML table of strings that only its owner may read.
fn read_secrets(path: &Path) -> Result<BTreeMap<String, String>> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path)
        .with_context(|| format!("reading the secrets file {}", path.display()))?
        .permissions()
        .mode();
    if mode & 0o077 != 0 {
        bail!(
            "the secrets file {} is open to its group or others (mode {:03o}); make it private \
             with `chmod 600 {}`",
            path.display(),
            mode & 0o777,
            path.display()
        );
    }
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the secrets file {}", path.display()))?;
    parse_secrets(&text).with_context(|| {
        format!(
            "the secrets file {} must be a TOML table of strings (NAME = \"value\")",
            path.display()
        )
    })
}

/// Parses a secrets file's text. An error names the line and what is wrong, never the line
/// itself: toml's own message quotes the source, and that line holds a secret.
pub(super) fn parse_secrets(text: &str) -> Result<BTreeMap<String, String>> {
    let line_of = |offset: usize| text[..offset.min(text.len())].matches('\n').count() + 1;
    let table: BTreeMap<String, toml::Spanned<toml::Value>> = match toml::from_str(text) {
        Ok(table) => table,
        Err(error) => {
            let at = error.span().map_or_else(String::new, |span| {
                format!("line {}: ", line_of(span.start))
            });
            // The parser's own description ("invalid string, expected `\"`") names tokens,
            // not the text; only the rendered error quotes the line.
            let what = error.message().lines().next().unwrap_or_default();
            bail!("{at}not valid TOML: {what} (the line is not shown: it may hold a secret)");
        }
    };
    table
        .into_iter()
        .map(|(name, value)| {
            let line = line_of(value.span().start);
            match value.into_inner() {
                toml::Value::String(value) => Ok((name, value)),
                other => bail!(
                    "line {line}: {name} is not a string but a TOML {}",
                    other.type_str()
                ),
            }
        })
        .collect()
}
