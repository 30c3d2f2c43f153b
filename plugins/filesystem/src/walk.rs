//! Walking directories (without following symbolic links) and matching glob patterns.

use std::fs::{self, FileType};
use std::path::Path;

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

use crate::exports::moat::filesystem::tools::EntryKind;
use crate::mounts::Target;

/// One directory entry.
pub struct Entry {
    pub name: String,
    /// The path from the walk's root, `/` between names.
    pub relative: String,
    pub kind: EntryKind,
    /// The size of a file.
    pub size: Option<u64>,
}

/// What a file type is, a symbolic link taken as itself.
pub fn kind(file_type: &FileType) -> EntryKind {
    if file_type.is_symlink() {
        EntryKind::Symlink
    } else if file_type.is_dir() {
        EntryKind::Directory
    } else if file_type.is_file() {
        EntryKind::File
    } else {
        EntryKind::Other
    }
}

/// A depth-first walk, each directory before its contents, names in order.
pub struct Walk<'a> {
    target: &'a Target<'a>,
    exclude: &'a Patterns,
    max_depth: u32,
    /// Entries still to visit, the next one last, with their depth (1 for the root's own).
    pending: Vec<(Entry, u32)>,
    /// True when a directory at the depth limit had contents left out.
    pub cut_short: bool,
}

impl<'a> Walk<'a> {
    /// A walk of `target`, a directory, down to `max_depth` levels, skipping what `exclude` matches.
    pub fn new(
        target: &'a Target<'a>,
        max_depth: u32,
        exclude: &'a Patterns,
    ) -> Result<Self, String> {
        let mut walk = Self {
            target,
            exclude,
            max_depth,
            pending: Vec::new(),
            cut_short: false,
        };
        let entries = Self::read_dir(target, &target.path)?;
        walk.push(entries, "", 1);
        Ok(walk)
    }

    /// The entries of `dir` in name order; `target` names the walk's root in errors.
    pub fn read_dir(target: &Target, dir: &Path) -> Result<Vec<Entry>, String> {
        let meta = fs::metadata(dir).map_err(|e| target.error("list", e))?;
        if !meta.is_dir() {
            return Err(format!("{} is not a directory", dir.display()));
        }
        let mut entries = Vec::new();
        for entry in fs::read_dir(dir).map_err(|e| target.error("list", e))? {
            let entry = entry.map_err(|e| target.error("list", e))?;
            let Ok(file_type) = entry.file_type() else {
                continue;
            };
            let kind = kind(&file_type);
            let size = match kind {
                EntryKind::File => entry.metadata().ok().map(|m| m.len()),
                _ => None,
            };
            let name = entry.file_name().to_string_lossy().into_owned();
            entries.push(Entry {
                relative: name.clone(),
                name,
                kind,
                size,
            });
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(entries)
    }

    fn push(&mut self, entries: Vec<Entry>, parent: &str, depth: u32) {
        for mut entry in entries.into_iter().rev() {
            if !parent.is_empty() {
                entry.relative = format!("{parent}/{}", entry.name);
            }
            if !self.exclude.matches(&entry.relative) {
                self.pending.push((entry, depth));
            }
        }
    }
}

impl Iterator for Walk<'_> {
    type Item = Entry;

    fn next(&mut self) -> Option<Entry> {
        let (entry, depth) = self.pending.pop()?;
        if let EntryKind::Directory = entry.kind {
            let dir = self.target.path.join(&entry.relative);
            // A directory that cannot be read (it vanished, or the host refuses) is listed empty.
            let children = Self::read_dir(self.target, &dir).unwrap_or_default();
            if depth < self.max_depth {
                self.push(children, &entry.relative, depth + 1);
            } else if !children.is_empty() {
                self.cut_short = true;
            }
        }
        Some(entry)
    }
}

/// Glob patterns: one without `/` matches a name at any depth, one with `/` the whole relative
/// path. `*` and `?` stay within a name; `**` crosses directories.
pub struct Patterns {
    names: GlobSet,
    paths: GlobSet,
}

impl Patterns {
    pub fn new(patterns: Vec<String>) -> Result<Self, String> {
        let (mut names, mut paths) = (GlobSetBuilder::new(), GlobSetBuilder::new());
        for pattern in patterns {
            let trimmed = pattern.trim_start_matches("./").trim_end_matches('/');
            let glob = GlobBuilder::new(trimmed)
                .literal_separator(true)
                .build()
                .map_err(|e| format!("invalid glob pattern {pattern:?}: {}", e.kind()))?;
            if trimmed.contains('/') {
                paths.add(glob);
            } else {
                names.add(glob);
            }
        }
        let build = |set: GlobSetBuilder| set.build().map_err(|e| format!("glob patterns: {e}"));
        Ok(Self {
            names: build(names)?,
            paths: build(paths)?,
        })
    }

    /// Whether `relative` (a path from the walk's root) is matched.
    pub fn matches(&self, relative: &str) -> bool {
        let name = relative.rsplit('/').next().unwrap_or(relative);
        self.names.is_match(name) || self.paths.is_match(relative)
    }
}
