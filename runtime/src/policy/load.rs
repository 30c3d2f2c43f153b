//! Reading policy files: each parsed, its policies named, all of them checked against the schema
//! of what is served. Any error fails the whole load with Cedar's message and where it is.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use cedar_policy::{PolicyId, PolicySet, Schema, ValidationMode, Validator};
use miette::Diagnostic;

/// Who named a policy file; the enterprise's come first, and moat.toml's cannot lift their
/// `forbid`s (in Cedar a `forbid` always beats a `permit`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Author {
    Enterprise,
    Operator,
}

/// A policy file to read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyFile {
    pub path: PathBuf,
    pub author: Author,
}

/// One policy's origin, for messages.
pub struct Origin {
    pub path: PathBuf,
    pub text: std::sync::Arc<str>,
    pub author: Author,
}

/// The policies of `files`, each named by its `@id("…")` or else `FILE#N` (its place in its
/// file), validated against `schema`; and where each came from.
pub fn read(files: &[PolicyFile], schema: &Schema) -> Result<(PolicySet, Vec<(PolicyId, Origin)>)> {
    let mut all = PolicySet::new();
    let mut origins: Vec<(PolicyId, Origin)> = Vec::new();
    for file in files {
        let text: std::sync::Arc<str> = std::fs::read_to_string(&file.path)
            .with_context(|| format!("reading the policy file {}", file.path.display()))?
            .into();
        let set: PolicySet = text.parse().map_err(|errors: cedar_policy::ParseErrors| {
            let messages: Vec<String> = errors
                .iter()
                .map(|error| located(&file.path, &text, error))
                .collect();
            anyhow!("{}", messages.join("\n"))
        })?;
        if set.templates().next().is_some() {
            bail!(
                "{}: a template (a policy with ?principal or ?resource) is not used by moat; write \
                 the policy for its principal or resource",
                file.path.display()
            );
        }
        let stem = file.path.file_name().map_or_else(
            || file.path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        let mut policies: Vec<_> = set
            .policies()
            .map(|p| {
                let place: usize = p
                    .id()
                    .to_string()
                    .trim_start_matches("policy")
                    .parse()
                    .unwrap_or(0);
                (place, p)
            })
            .collect();
        policies.sort_by_key(|(place, _)| *place);
        for (place, policy) in policies {
            let id = match policy.annotation("id") {
                Some(id) => PolicyId::new(id),
                None => PolicyId::new(format!("{stem}#{}", place + 1)),
            };
            if let Some((_, other)) = origins.iter().find(|(known, _)| *known == id) {
                bail!(
                    "{}: policy `{id}` is also in {}: give one another @id",
                    file.path.display(),
                    other.path.display()
                );
            }
            all.add(policy.new_id(id.clone()))
                .map_err(|e| anyhow!("{}: {e}", file.path.display()))?;
            origins.push((
                id,
                Origin {
                    path: file.path.clone(),
                    text: text.clone(),
                    author: file.author,
                },
            ));
        }
    }
    let validated = Validator::new(schema.clone()).validate(&all, ValidationMode::Strict);
    let origin_of = |id: &PolicyId| {
        origins
            .iter()
            .find(|(known, _)| known == id)
            .map(|(_, o)| o)
    };
    for warning in validated.validation_warnings() {
        let at = origin_of(warning.policy_id());
        let message = match at {
            Some(origin) => located(&origin.path, &origin.text, warning),
            None => warning.to_string(),
        };
        tracing::warn!("policy `{}`: {message}", warning.policy_id());
    }
    if !validated.validation_passed() {
        let messages: Vec<String> = validated
            .validation_errors()
            .map(|error| {
                let id = error.policy_id();
                match origin_of(id) {
                    Some(origin) => located(&origin.path, &origin.text, error),
                    None => format!("policy `{id}`: {error}"),
                }
            })
            .collect();
        bail!(
            "the policies do not fit what moat serves (see `moat policy schema`):\n{}",
            messages.join("\n")
        );
    }
    Ok((all, origins))
}

/// `FILE:LINE:COLUMN: message`, the line, a caret under where Cedar points, and Cedar's help.
pub fn located(path: &Path, text: &str, error: &dyn Diagnostic) -> String {
    let mut out = String::new();
    let offset = error
        .labels()
        .and_then(|mut labels| labels.next())
        .map(|l| l.offset());
    match offset {
        Some(offset) if offset <= text.len() => {
            let before = &text[..offset];
            let line = before.matches('\n').count() + 1;
            let start = before.rfind('\n').map_or(0, |i| i + 1);
            let column = text[start..offset].chars().count() + 1;
            let end = text[offset..].find('\n').map_or(text.len(), |i| offset + i);
            out.push_str(&format!("{}:{line}:{column}: {error}", path.display()));
            out.push_str(&format!(
                "\n  {}\n  {}^",
                &text[start..end],
                " ".repeat(column - 1)
            ));
        }
        _ => out.push_str(&format!("{}: {error}", path.display())),
    }
    if let Some(help) = error.help() {
        out.push_str(&format!("\n  help: {help}"));
    }
    out
}
