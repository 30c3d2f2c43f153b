//! `moat cache`: what the cache folder holds and how much, and clearing it.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};

use moat::supply::cache::Cache;
use moat::supply::source::Store;

use super::print_out;

/// Prints the cache folder.
pub fn print_dir() -> Result<ExitCode> {
    print_out(&dir()?.display().to_string());
    Ok(ExitCode::SUCCESS)
}

/// Deletes every compiled plugin, and the downloads.
pub fn clear() -> Result<ExitCode> {
    let dir = Cache::default_dir().context("no cache folder: set MOAT_CACHE_DIR")?;
    let removed = Cache::clear(&dir)?;
    let plugins = if removed == 1 { "plugin" } else { "plugins" };
    eprintln!(
        "moat: removed {removed} compiled {plugins} from {}",
        dir.display()
    );
    if let Some(store) = Store::default_dir().filter(|d| d.exists()) {
        std::fs::remove_dir_all(&store).with_context(|| format!("removing {}", store.display()))?;
        eprintln!("moat: removed the downloads in {}", store.display());
    }
    Ok(ExitCode::SUCCESS)
}

pub fn dir() -> Result<PathBuf> {
    Cache::default_dir().context("no cache folder: set MOAT_CACHE_DIR (or HOME)")
}

/// One line per compiled plugin (`compiled sha256:… SIZE`) and per downloaded file.
pub fn list() -> Result<ExitCode> {
    let dir = dir()?;
    let mut lines = Vec::new();
    let mut compiled: Vec<(String, u64)> = files(&dir)
        .into_iter()
        .filter(|(path, _)| path.extension().is_some_and(|e| e == "cwasm"))
        .map(|(path, size)| {
            let name = path.file_stem().unwrap_or_default().to_string_lossy();
            let digest = name.split('-').next().unwrap_or_default().to_string();
            (digest, size)
        })
        .collect();
    compiled.sort();
    for (digest, size) in compiled {
        lines.push(format!("compiled  sha256:{digest}  {}", human(size)));
    }
    if let Some(store) = Store::default_dir() {
        let mut downloads = all_files(&store);
        downloads.sort();
        for (path, size) in downloads {
            let shown = path.strip_prefix(&store).unwrap_or(&path);
            lines.push(format!("download  {}  {}", shown.display(), human(size)));
        }
    }
    if lines.is_empty() {
        eprintln!("moat: {} holds nothing", dir.display());
    } else {
        print_out(&lines.join("\n"));
    }
    Ok(ExitCode::SUCCESS)
}

/// The bytes the cache folder holds, in all.
pub fn size() -> Result<ExitCode> {
    let dir = dir()?;
    let total = total_size(&dir);
    print_out(&format!("{}  {}", human(total), dir.display()));
    Ok(ExitCode::SUCCESS)
}

/// The bytes of every file under `dir`; 0 for a folder that does not exist.
pub fn total_size(dir: &Path) -> u64 {
    all_files(dir).iter().map(|(_, size)| size).sum()
}

/// The files directly in `dir`, with their sizes.
fn files(dir: &Path) -> Vec<(PathBuf, u64)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let meta = entry.metadata().ok()?;
            meta.is_file().then(|| (entry.path(), meta.len()))
        })
        .collect()
}

/// The files under `dir`, in every folder below it, with their sizes.
fn all_files(dir: &Path) -> Vec<(PathBuf, u64)> {
    let mut found = files(dir);
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            // Not through symlinks: the cache holds none of its own.
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                found.extend(all_files(&entry.path()));
            }
        }
    }
    found
}

/// A size in B, KiB, MiB or GiB.
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    match unit {
        0 => format!("{bytes} B"),
        _ => format!("{value:.1} {}", UNITS[unit]),
    }
}
