//! What a plugin may load with: its manifest's requests, cut down to the operator's grant, cut
//! down to the policy's ceiling, with every cut noted and its reason.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use serde::Serialize;

use super::{Ceiling, Policy, glob_match, guest_within};
use crate::sandbox::grants::Grants;
use crate::sandbox::limits::Limits;
use crate::sandbox::network::{Network, NetworkGrant};
use crate::supply::PluginSource;
use crate::supply::manifest::{Manifest, Mode};
use crate::supply::source::Fetched;

/// Checks the plugin at `source` (its component and signature fetched once) against `policy`,
/// and logs what became of its grants. The error says why it may not load.
pub fn admit(policy: &Policy, source: &PluginSource, component: &Fetched) -> Result<Admitted> {
    let admitted = policy
        .admit(source, component)
        .with_context(|| format!("plugin \"{}\" is not loaded", source.name))?;
    admitted.log(&source.name);
    Ok(admitted)
}

/// What a plugin may load with, and why.
#[derive(Clone, Debug, Default)]
pub struct Admitted {
    /// `sha256:` and the hex sha256 of the component's bytes.
    pub digest: String,
    /// The publisher whose signature the plugin carries, if any.
    pub publisher: Option<String>,
    /// Why it may load: the allow rule that matched.
    pub allowed_by: String,
    pub manifest: Option<Manifest>,
    /// The fate of every grant and limit.
    pub notes: Vec<Note>,
    pub limits: Limits,
    pub grants: Grants,
}

impl Admitted {
    /// Logs the notes: cuts as warnings, the rest quieter.
    pub fn log(&self, plugin: &str) {
        for note in &self.notes {
            match note.fate {
                Fate::Cut | Fate::Narrowed => tracing::warn!(plugin, "{note}"),
                Fate::Missing => tracing::info!(plugin, "{note}"),
                // The operator chose part of what the plugin may reach (`*:*`): nothing to act on.
                Fate::Granted | Fate::Partial => tracing::debug!(plugin, "{note}"),
            }
        }
    }
}

/// What became of one grant or limit.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Note {
    /// The grant, as the operator wrote it (`directory /srv/a at /a (rw)`, `env TOKEN`…).
    pub grant: String,
    pub fate: Fate,
    pub reason: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Fate {
    /// Given as the operator wrote it.
    Granted,
    /// Given, but narrower (read-only, a lower limit).
    Narrowed,
    /// Not given.
    Cut,
    /// The plugin asks for it, and the operator granted none of it.
    Missing,
    /// The plugin asks for hosts, and the operator granted some of them (a plugin asking for
    /// `*:*` to reach whatever its operator chooses).
    Partial,
}

impl Fate {
    /// The fate in words, as notes and the console say it.
    pub fn as_str(self) -> &'static str {
        match self {
            Fate::Granted => "granted",
            Fate::Narrowed => "narrowed",
            Fate::Cut => "cut",
            Fate::Missing => "not granted",
            Fate::Partial => "granted in part",
        }
    }
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}: {}", self.grant, self.fate.as_str(), self.reason)
    }
}

fn note(grant: impl Into<String>, fate: Fate, reason: impl Into<String>) -> Note {
    Note {
        grant: grant.into(),
        fate,
        reason: reason.into(),
    }
}

/// The effective grant: requested ∩ operator ∩ ceiling. Without a manifest the plugin's needs
/// are unknown, and the operator's grants stand (within the ceiling).
pub fn effective(
    manifest: Option<&Manifest>,
    limits: &Limits,
    grants: &Grants,
    ceiling: &Ceiling,
) -> (Limits, Grants, Vec<Note>) {
    let mut notes = Vec::new();
    let mut out = Grants::default();

    for grant in &grants.files {
        let mut mode = Mode::from_writable(grant.writable);
        let label = format!(
            "directory {} at {} ({})",
            grant.host.display(),
            grant.guest,
            mode.as_str()
        );
        let mut narrowed = Vec::new();
        if let Some(manifest) = manifest {
            let asked = manifest
                .files
                .iter()
                .filter(|r| guest_within(&grant.guest, &r.guest))
                .map(|r| r.mode)
                .max();
            match asked {
                None => {
                    notes.push(note(
                        label,
                        Fate::Cut,
                        format!(
                            "beyond the request: the plugin does not ask for {}",
                            grant.guest
                        ),
                    ));
                    continue;
                }
                Some(asked) if asked < mode => {
                    mode = asked;
                    narrowed.push("the plugin asks for it read-only".to_string());
                }
                Some(_) => {}
            }
        }
        if let Some(dirs) = &ceiling.directories {
            let allowed = dirs
                .iter()
                .filter(|c| grant.host.starts_with(&c.path))
                .map(|c| c.mode)
                .max();
            match allowed {
                None => {
                    let list: Vec<String> =
                        dirs.iter().map(|d| d.path.display().to_string()).collect();
                    notes.push(note(
                        label,
                        Fate::Cut,
                        format!(
                            "the policy allows directories only beneath [{}]",
                            list.join(", ")
                        ),
                    ));
                    continue;
                }
                Some(allowed) if allowed < mode => {
                    mode = allowed;
                    narrowed.push("the policy allows it read-only".to_string());
                }
                Some(_) => {}
            }
        }
        notes.push(if narrowed.is_empty() {
            note(
                label,
                Fate::Granted,
                granted_reason(manifest.is_some(), ceiling.directories.is_some()),
            )
        } else {
            note(
                label,
                Fate::Narrowed,
                format!("read-only: {}", narrowed.join("; ")),
            )
        });
        out.files.push(grant.with_writable(mode == Mode::ReadWrite));
    }
    if let Some(manifest) = manifest {
        for asked in &manifest.files {
            if !out
                .files
                .iter()
                .any(|g| guest_within(&g.guest, &asked.guest))
            {
                notes.push(note(
                    format!("directory at {} ({})", asked.guest, asked.mode.as_str()),
                    Fate::Missing,
                    "the plugin asks for it; the operator grants no such directory",
                ));
            }
        }
    }

    out.env = narrow_named(
        "env",
        grants.env.iter().map(|(k, v)| (k, v)),
        manifest.map(|m| m.env.as_slice()),
        ceiling.env.as_deref(),
        &mut notes,
    );
    out.config = Arc::new(
        narrow_named(
            "config",
            grants.config.iter(),
            manifest.map(|m| m.config.as_slice()),
            ceiling.config.as_deref(),
            &mut notes,
        )
        .into_iter()
        .collect(),
    );

    let mut limits = limits.clone();
    limits.max_memory_bytes = narrow_limit(
        "memory",
        limits.max_memory_bytes,
        manifest.and_then(|m| m.max_memory_mb).map(|mb| mb << 20),
        ceiling.max_memory_bytes,
        |bytes| format!("{} MB", bytes >> 20),
        &mut notes,
    );
    limits.deadline = narrow_limit(
        "deadline",
        limits.deadline,
        manifest
            .and_then(|m| m.deadline_ms)
            .map(Duration::from_millis),
        ceiling.deadline,
        |d| format!("{} ms", d.as_millis()),
        &mut notes,
    );

    let (network, network_notes) = narrow_network(
        manifest.map(|m| m.network.as_slice()),
        &grants.network.grants,
        ceiling.network.as_deref(),
    );
    notes.extend(network_notes);
    out.network = Arc::new(Network {
        grants: network,
        ..(*grants.network).clone()
    });
    (limits, out, notes)
}

/// Named values (environment variables, settings): each granted one the plugin asks for (when
/// it has a manifest) and the ceiling's patterns allow, and a note for every one missing.
fn narrow_named<'a>(
    kind: &str,
    granted: impl Iterator<Item = (&'a String, &'a String)>,
    asked: Option<&[String]>,
    ceiling: Option<&[String]>,
    notes: &mut Vec<Note>,
) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for (name, value) in granted {
        let label = format!("{kind} {name}");
        if asked.is_some_and(|asked| !asked.contains(name)) {
            notes.push(note(
                label,
                Fate::Cut,
                format!("beyond the request: the plugin does not ask for {name}"),
            ));
            continue;
        }
        if let Some(allowed) = ceiling
            && !allowed.iter().any(|pattern| glob_match(pattern, name))
        {
            let what = if kind == "env" {
                "variables"
            } else {
                "settings"
            };
            notes.push(note(
                label,
                Fate::Cut,
                format!("the policy allows only the {what} [{}]", allowed.join(", ")),
            ));
            continue;
        }
        notes.push(note(
            label,
            Fate::Granted,
            granted_reason(asked.is_some(), ceiling.is_some()),
        ));
        out.push((name.clone(), value.clone()));
    }
    for name in asked.unwrap_or_default() {
        if !out.iter().any(|(n, _)| n == name) {
            notes.push(note(
                format!("{kind} {name}"),
                Fate::Missing,
                "the plugin asks for it",
            ));
        }
    }
    out
}

/// Why a grant stands whole: what vouched for it. The policy is named only when one sets a
/// ceiling on this kind of grant.
fn granted_reason(has_manifest: bool, has_ceiling: bool) -> &'static str {
    match (has_manifest, has_ceiling) {
        (true, true) => "the plugin asks for it, and the policy allows it",
        (true, false) => "the plugin asks for it",
        (false, true) => {
            "the plugin has no manifest, so the operator's grant stands; the policy allows it"
        }
        (false, false) => "the plugin has no manifest, so the operator's grant stands",
    }
}

/// A limit: the operator's value, lowered to what the plugin asks for and to the ceiling.
fn narrow_limit<T: Copy + Ord>(
    name: &str,
    operator: T,
    asked: Option<T>,
    ceiling: Option<T>,
    show: impl Fn(T) -> String,
    notes: &mut Vec<Note>,
) -> T {
    let mut value = operator;
    let mut reasons = vec![format!("the operator allows {}", show(operator))];
    let mut fate = Fate::Granted;
    if let Some(asked) = asked {
        if asked < value {
            value = asked;
            reasons.push(format!("the plugin asks for {}", show(asked)));
        } else if asked > value {
            fate = Fate::Missing;
            reasons.push(format!(
                "the plugin asks for {}, more than that",
                show(asked)
            ));
        }
    }
    if let Some(ceiling) = ceiling
        && ceiling < value
    {
        value = ceiling;
        fate = Fate::Narrowed;
        reasons.push(format!("the policy caps it at {}", show(ceiling)));
    }
    notes.push(note(
        format!("{name} = {}", show(value)),
        fate,
        reasons.join("; "),
    ));
    value
}

/// The network part of the effective grant: each granted pattern, narrowed to what the plugin
/// asks for (when it has a manifest) and to the ceiling.
pub fn narrow_network(
    requested: Option<&[NetworkGrant]>,
    granted: &[NetworkGrant],
    ceiling: Option<&[NetworkGrant]>,
) -> (Vec<NetworkGrant>, Vec<Note>) {
    let mut notes = Vec::new();
    let mut out = Vec::new();
    for grant in granted {
        let label = format!("network {grant}");
        let mut kept = vec![grant.clone()];
        if let Some(requested) = requested {
            kept = intersect(&kept, requested);
            if kept.is_empty() {
                notes.push(note(
                    label,
                    Fate::Cut,
                    "beyond the request: the plugin asks for no such host",
                ));
                continue;
            }
        }
        if let Some(ceiling) = ceiling {
            kept = intersect(&kept, ceiling);
            if kept.is_empty() {
                notes.push(note(
                    label,
                    Fate::Cut,
                    "outside the hosts the policy allows",
                ));
                continue;
            }
        }
        if kept.as_slice() == std::slice::from_ref(grant) {
            notes.push(note(
                label,
                Fate::Granted,
                granted_reason(requested.is_some(), ceiling.is_some()),
            ));
        } else {
            let shown: Vec<String> = kept.iter().map(ToString::to_string).collect();
            notes.push(note(
                label,
                Fate::Narrowed,
                format!("narrowed to [{}]", shown.join(", ")),
            ));
        }
        out.extend(kept);
    }
    for asked in requested.unwrap_or_default() {
        if out.iter().any(|g| g.covers(asked)) {
            continue;
        }
        let part: Vec<String> = out
            .iter()
            .filter(|g| asked.covers(g))
            .map(ToString::to_string)
            .collect();
        notes.push(if part.is_empty() {
            note(
                format!("network {asked}"),
                Fate::Missing,
                "the plugin asks for it",
            )
        } else {
            note(
                format!("network {asked}"),
                Fate::Partial,
                format!(
                    "the plugin asks for it; the operator grants [{}] of it",
                    part.join(", ")
                ),
            )
        });
    }
    (out, notes)
}

/// The patterns in both lists: a pattern of one that the other covers.
pub(super) fn intersect(a: &[NetworkGrant], b: &[NetworkGrant]) -> Vec<NetworkGrant> {
    narrower_of_each(a, b, |wide, narrow| wide.covers(narrow))
}

/// For each pair of patterns, one from each list, where one `covers` the other: the narrower.
pub(super) fn narrower_of_each<T: Clone + PartialEq>(
    a: &[T],
    b: &[T],
    covers: impl Fn(&T, &T) -> bool,
) -> Vec<T> {
    let mut out: Vec<T> = Vec::new();
    for x in a {
        for y in b {
            let narrower = if covers(y, x) {
                x
            } else if covers(x, y) {
                y
            } else {
                continue;
            };
            if !out.contains(narrower) {
                out.push(narrower.clone());
            }
        }
    }
    out
}
