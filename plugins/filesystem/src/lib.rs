//! The `filesystem` plugin: read, write, edit, list and search files, only inside the directories
//! the operator granted.

mod mounts;
mod walk;

use std::fs;
use std::io::Write;
use std::path::Path;
use std::time::SystemTime;

use mounts::{Mounts, Target};
use walk::{Patterns, Walk};

moat_guest::generate!("filesystem");

use exports::moat::filesystem::tools::{
    AllowedDirectory, Edit, EntryKind, FileInfo, FileText, Guest, SortOrder, Tree, TreeEntry,
};

/// The deepest `directory-tree` walks.
const MAX_TREE_DEPTH: u32 = 64;
/// The most entries `directory-tree` returns.
const MAX_TREE_ENTRIES: usize = 10_000;
/// How many paths `search-files` returns unless told otherwise.
const DEFAULT_SEARCH_LIMIT: u32 = 1000;

struct Filesystem;

impl Guest for Filesystem {
    fn read_text_file(
        path: String,
        head: Option<u32>,
        tail: Option<u32>,
    ) -> Result<String, String> {
        if head.is_some() && tail.is_some() {
            return Err("give head or tail, not both".into());
        }
        let mounts = Mounts::granted();
        let text = read_text(&mounts.resolve(&path)?)?;
        let lines = || text.split_inclusive('\n');
        Ok(match (head, tail) {
            (Some(n), _) => lines().take(n as usize).collect(),
            (_, Some(n)) => {
                let count = lines().count();
                lines().skip(count.saturating_sub(n as usize)).collect()
            }
            _ => text,
        })
    }

    fn read_multiple_files(paths: Vec<String>) -> Vec<FileText> {
        let mounts = Mounts::granted();
        paths
            .into_iter()
            .map(|path| FileText {
                text: mounts.resolve(&path).and_then(|t| read_text(&t)),
                path,
            })
            .collect()
    }

    fn write_file(path: String, content: String) -> Result<String, String> {
        let mounts = Mounts::granted();
        let target = mounts.resolve(&path)?;
        write_atomically(&target, content.as_bytes())?;
        Ok(format!(
            "wrote {} bytes to {}",
            content.len(),
            target.show()
        ))
    }

    fn edit_file(path: String, edits: Vec<Edit>, dry_run: Option<bool>) -> Result<String, String> {
        let mounts = Mounts::granted();
        let target = mounts.resolve(&path)?;
        let dry_run = dry_run.unwrap_or(false);
        if !dry_run {
            target.writable()?;
        }
        let before = read_text(&target)?;
        let mut after = before.clone();
        for (number, edit) in edits.iter().enumerate() {
            let number = number + 1;
            if edit.old_text.is_empty() {
                return Err(format!("edit {number}: old-text is empty"));
            }
            match after.matches(edit.old_text.as_str()).count() {
                1 => after = after.replacen(edit.old_text.as_str(), &edit.new_text, 1),
                0 => {
                    return Err(format!(
                        "edit {number}: old-text was not found in {}{}; it must match exactly, \
                         whitespace and line breaks included",
                        target.show(),
                        if number > 1 {
                            " after the edits before it"
                        } else {
                            ""
                        }
                    ));
                }
                n => {
                    return Err(format!(
                        "edit {number}: old-text occurs {n} times in {}; include more of the \
                         surrounding text so that it occurs once",
                        target.show()
                    ));
                }
            }
        }
        let name = target.show();
        let diff = similar::TextDiff::from_lines(&before, &after)
            .unified_diff()
            .context_radius(3)
            .header(&name, &name)
            .to_string();
        if diff.is_empty() {
            return Ok(format!("no change: the edits leave {name} as it was"));
        }
        if dry_run {
            return Ok(format!("Dry run: no changes were written.\n{diff}"));
        }
        write_atomically(&target, after.as_bytes())?;
        Ok(diff)
    }

    fn create_directory(path: String) -> Result<String, String> {
        let mounts = Mounts::granted();
        let target = mounts.resolve(&path)?;
        if fs::metadata(&target.path).is_ok_and(|m| m.is_dir()) {
            return Ok(format!("{} already exists", target.show()));
        }
        target.writable()?;
        fs::create_dir_all(&target.path).map_err(|e| target.error("create", e))?;
        Ok(format!("created {}", target.show()))
    }

    fn list_directory(path: String, sort_by: Option<SortOrder>) -> Result<String, String> {
        let mounts = Mounts::granted();
        let target = mounts.resolve(&path)?;
        let mut entries = Walk::read_dir(&target, &target.path)?;
        if let Some(SortOrder::Size) = sort_by {
            entries.sort_by_key(|e| std::cmp::Reverse(e.size.unwrap_or(0)));
        }
        let (mut files, mut dirs, mut bytes) = (0, 0, 0);
        let mut out = String::new();
        for entry in &entries {
            let marker = match entry.kind {
                EntryKind::Directory => "[DIR] ",
                EntryKind::File => "[FILE]",
                EntryKind::Symlink => "[LINK]",
                EntryKind::Other => "[OTHER]",
            };
            out.push_str(&format!("{marker} {}", entry.name));
            match entry.kind {
                EntryKind::Directory => dirs += 1,
                EntryKind::File => {
                    let size = entry.size.unwrap_or(0);
                    files += 1;
                    bytes += size;
                    out.push_str(&format!(" ({})", byte_count(size)));
                }
                _ => {}
            }
            out.push('\n');
        }
        out.push_str(&format!(
            "{files} {}, {dirs} {}; {} in files",
            plural(files, "file", "files"),
            plural(dirs, "directory", "directories"),
            byte_count(bytes)
        ));
        Ok(out)
    }

    fn directory_tree(
        path: String,
        depth: Option<u32>,
        exclude: Option<Vec<String>>,
    ) -> Result<Tree, String> {
        let depth = depth.unwrap_or(8).clamp(1, MAX_TREE_DEPTH);
        let mounts = Mounts::granted();
        let target = mounts.resolve(&path)?;
        let exclude = Patterns::new(exclude.unwrap_or_default())?;
        let mut walk = Walk::new(&target, depth, &exclude)?;
        let mut entries = Vec::new();
        let mut truncated = false;
        for entry in walk.by_ref() {
            if entries.len() == MAX_TREE_ENTRIES {
                truncated = true;
                break;
            }
            entries.push(TreeEntry {
                path: entry.relative,
                kind: entry.kind,
                size: entry.size,
            });
        }
        Ok(Tree {
            entries,
            truncated: truncated || walk.cut_short,
        })
    }

    fn move_file(source: String, destination: String) -> Result<String, String> {
        let mounts = Mounts::granted();
        let from = mounts.resolve(&source)?;
        let to = mounts.resolve(&destination)?;
        fs::symlink_metadata(&from.path).map_err(|e| from.error("move", e))?;
        if fs::symlink_metadata(&to.path).is_ok() {
            return Err(format!("{} already exists; move it away first", to.show()));
        }
        from.writable()?;
        to.writable()?;
        if from.mount.path != to.mount.path {
            return Err(format!(
                "{} and {} are in different granted directories ({} and {}); a move stays \
                 within one",
                from.show(),
                to.show(),
                from.mount.path.display(),
                to.mount.path.display()
            ));
        }
        if to.path.starts_with(&from.path) {
            return Err(format!("cannot move {} into itself", from.show()));
        }
        fs::rename(&from.path, &to.path).map_err(|e| to.error("move to", e))?;
        Ok(format!("moved {} to {}", from.show(), to.show()))
    }

    fn search_files(
        path: String,
        pattern: String,
        exclude: Option<Vec<String>>,
        limit: Option<u32>,
    ) -> Result<Vec<String>, String> {
        let mounts = Mounts::granted();
        let target = mounts.resolve(&path)?;
        let wanted = Patterns::new(vec![pattern])?;
        let exclude = Patterns::new(exclude.unwrap_or_default())?;
        let limit = limit.unwrap_or(DEFAULT_SEARCH_LIMIT) as usize;
        let mut found = Vec::new();
        let mut walk = Walk::new(&target, MAX_TREE_DEPTH, &exclude)?;
        while found.len() < limit
            && let Some(entry) = walk.next()
        {
            if wanted.matches(&entry.relative) {
                found.push(target.path.join(&entry.relative).display().to_string());
            }
        }
        Ok(found)
    }

    fn get_file_info(path: String) -> Result<FileInfo, String> {
        let mounts = Mounts::granted();
        let target = mounts.resolve(&path)?;
        let meta = fs::symlink_metadata(&target.path).map_err(|e| target.error("read", e))?;
        let time = |t: std::io::Result<SystemTime>| {
            t.ok()
                .and_then(|t| jiff::Timestamp::try_from(t).ok())
                .map(|t| t.to_string())
        };
        Ok(FileInfo {
            path: target.show(),
            kind: walk::kind(&meta.file_type()),
            size: meta.len(),
            modified: time(meta.modified()),
            accessed: time(meta.accessed()),
            created: time(meta.created()),
            read_only: !target.mount.writable,
        })
    }

    fn list_allowed_directories() -> Vec<AllowedDirectory> {
        Mounts::granted()
            .0
            .into_iter()
            .map(|m| AllowedDirectory {
                path: m.path.display().to_string(),
                read_only: !m.writable,
            })
            .collect()
    }
}

/// A file's text; a directory or non-UTF-8 content is an error that says so.
fn read_text(target: &Target) -> Result<String, String> {
    let meta = fs::metadata(&target.path).map_err(|e| target.error("read", e))?;
    if meta.is_dir() {
        return Err(format!("{} is a directory, not a file", target.show()));
    }
    fs::read_to_string(&target.path).map_err(|e| target.error("read", e))
}

/// Writes `bytes` to a temporary file beside the target and renames it over the target, so the
/// file is either old or new, never half written.
fn write_atomically(target: &Target, bytes: &[u8]) -> Result<(), String> {
    target.writable()?;
    if fs::metadata(&target.path).is_ok_and(|m| m.is_dir()) {
        return Err(format!("{} is a directory, not a file", target.show()));
    }
    let parent = target.path.parent().unwrap_or(Path::new("/"));
    match fs::metadata(parent) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => {
            return Err(format!(
                "{}: {} is not a directory",
                target.show(),
                parent.display()
            ));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(format!(
                "{}: the directory {} does not exist (create-directory makes it)",
                target.show(),
                parent.display()
            ));
        }
        Err(e) => return Err(target.error("write", e)),
    }
    let name = target
        .path
        .file_name()
        .unwrap_or_default()
        .to_string_lossy();
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let temp = parent.join(format!(".{name}.{nanos:09}.tmp"));
    let written = fs::File::create_new(&temp)
        .and_then(|mut file| file.write_all(bytes).and_then(|()| file.sync_all()))
        .and_then(|()| fs::rename(&temp, &target.path));
    written.map_err(|e| {
        let _ = fs::remove_file(&temp);
        target.error("write", e)
    })
}

fn plural<'a>(n: u64, one: &'a str, many: &'a str) -> &'a str {
    if n == 1 { one } else { many }
}

/// A size in bytes, with a rounded larger unit beside it from 1 KiB on.
fn byte_count(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    let mut size = bytes as f64;
    let mut unit = None;
    for u in UNITS {
        if size < 1024.0 {
            break;
        }
        size /= 1024.0;
        unit = Some(u);
    }
    match unit {
        None => format!("{bytes} {}", plural(bytes, "byte", "bytes")),
        Some(unit) => format!("{bytes} bytes, {size:.1} {unit}"),
    }
}

export!(Filesystem);
