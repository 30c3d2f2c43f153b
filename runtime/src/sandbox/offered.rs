//! What moat offers guests to import, by package and version: to tell the author of a plugin
//! that cannot link which of its imports is missing and what moat has instead, rather than
//! leave them with the linker's first complaint.

use semver::Version;

use crate::sandbox::config_store;

/// WASI 0.2, as wasmtime-wasi and wasmtime-wasi-http implement it.
const WASI: &[&str] = &["0.2.12"];

/// Each package moat offers interfaces of, at the versions it links them at.
pub const PACKAGES: &[(&str, &[&str])] = &[
    ("wasi:io", WASI),
    ("wasi:clocks", WASI),
    ("wasi:random", WASI),
    ("wasi:filesystem", WASI),
    ("wasi:sockets", WASI),
    ("wasi:cli", WASI),
    ("wasi:http", WASI),
    ("wasi:config", &config_store::VERSIONS),
    ("moat:plugin", &["0.1.0"]),
];

/// Why moat cannot link `import` (`namespace:package/interface@version`, as a component names
/// it), if it offers no version of that package the import is compatible with.
pub fn unoffered(import: &str) -> Option<String> {
    let (interface, version) = import.split_once('@').unwrap_or((import, ""));
    let package = interface.split_once('/').map_or(interface, |(p, _)| p);
    let Some((_, offered)) = PACKAGES.iter().find(|(name, _)| *name == package) else {
        let packages: Vec<&str> = PACKAGES.iter().map(|(name, _)| *name).collect();
        return Some(format!(
            "imports `{import}`, which moat does not offer; moat offers interfaces of {}",
            packages.join(", ")
        ));
    };
    if offered.iter().any(|o| compatible(version, o)) {
        return None;
    }
    let at: Vec<String> = offered.iter().map(|o| format!("{package}@{o}")).collect();
    Some(format!(
        "imports `{import}`, a version moat does not offer; moat offers {} (a component built \
         for {} links only to {})",
        at.join(", "),
        if version.is_empty() {
            "no version"
        } else {
            version
        },
        track(version)
    ))
}

/// Whether an import of `wanted` links to an implementation of `offered`, by wasmtime's rule:
/// the same version, or the same semver track (`1.x`, `0.2.x`) when neither is a pre-release.
fn compatible(wanted: &str, offered: &str) -> bool {
    if wanted == offered {
        return true;
    }
    match (Version::parse(wanted), Version::parse(offered)) {
        (Ok(a), Ok(b)) => {
            a.pre.is_empty() && b.pre.is_empty() && key(&a).is_some() && key(&a) == key(&b)
        }
        _ => false,
    }
}

/// A version's semver track: its major number from 1.0, else its minor from 0.1.
fn key(v: &Version) -> Option<(u64, u64)> {
    match (v.major, v.minor) {
        (0, 0) => None,
        (0, minor) => Some((0, minor)),
        (major, _) => Some((major, u64::MAX)),
    }
}

/// The versions `version` is compatible with, in words.
fn track(version: &str) -> String {
    match Version::parse(version) {
        Ok(v) if v.pre.is_empty() && v.major > 0 => format!("{}.x", v.major),
        Ok(v) if v.pre.is_empty() && v.minor > 0 => format!("0.{}.x", v.minor),
        _ => "that very version".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::unoffered;

    #[test]
    fn imports_on_an_offered_track_link() {
        for import in [
            "wasi:cli/environment@0.2.0",
            "wasi:io/streams@0.2.9",
            "wasi:http/types@0.2.12",
            "wasi:config/store@0.2.0-draft",
            "wasi:config/store@0.2.0-rc.1",
            "moat:plugin/log@0.1.0",
        ] {
            assert_eq!(unoffered(import), None, "{import}");
        }
    }

    #[test]
    fn other_versions_and_packages_are_named_with_what_moat_offers() {
        let wasi3 = unoffered("wasi:cli/environment@0.3.0").unwrap();
        assert!(wasi3.contains("`wasi:cli/environment@0.3.0`"), "{wasi3}");
        assert!(wasi3.contains("moat offers wasi:cli@0.2.12"), "{wasi3}");
        assert!(wasi3.contains("links only to 0.3.x"), "{wasi3}");
        let draft = unoffered("wasi:config/store@0.2.0-draft-2025-01-01").unwrap();
        assert!(draft.contains("wasi:config@0.2.0-rc.1"), "{draft}");
        assert!(draft.contains("that very version"), "{draft}");
        let other = unoffered("acme:kv/store@1.0.0").unwrap();
        assert!(other.contains("which moat does not offer"), "{other}");
        assert!(other.contains("wasi:filesystem"), "{other}");
        assert!(unoffered("moat:plugin/log@0.2.0").is_some());
    }
}
