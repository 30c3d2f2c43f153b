//! The granted directories, and what a path argument means in them.
//!
//! The host already confines every file operation to the granted directories; this module checks
//! paths first so that a refusal names the reason (outside every grant, a read-only grant, a
//! symbolic link leading out) instead of a bare "permission denied".

use std::io::{self, ErrorKind};
use std::path::{Component, Path, PathBuf};

use wasip2::filesystem::preopens::get_directories;
use wasip2::filesystem::types::DescriptorFlags;

/// A granted directory, at its guest path.
pub struct Mount {
    pub path: PathBuf,
    pub writable: bool,
}

/// A path argument, normalised, with the granted directory it lies in.
pub struct Target<'a> {
    pub path: PathBuf,
    pub mount: &'a Mount,
}

impl Target<'_> {
    /// The path as messages show it.
    pub fn show(&self) -> String {
        self.path.display().to_string()
    }

    /// Refuses a change inside a read-only grant.
    pub fn writable(&self) -> Result<(), String> {
        if self.mount.writable {
            Ok(())
        } else {
            Err(format!(
                "{} is in {}, which is granted read-only",
                self.show(),
                self.mount.path.display()
            ))
        }
    }

    /// Turns an I/O error on this path into a message that says what went wrong.
    pub fn error(&self, action: &str, error: io::Error) -> String {
        let path = self.show();
        match error.kind() {
            ErrorKind::NotFound => match self.escaping_link() {
                Some(why) => why,
                None => format!("{path}: no such file or directory"),
            },
            ErrorKind::PermissionDenied | ErrorKind::CrossesDevices => {
                if let Some(why) = self.escaping_link() {
                    why
                } else if !self.mount.writable && action != "read" && action != "list" {
                    self.writable().unwrap_err()
                } else {
                    format!("cannot {action} {path}: permission denied")
                }
            }
            ErrorKind::AlreadyExists => format!("{path} already exists"),
            ErrorKind::IsADirectory => format!("{path} is a directory, not a file"),
            ErrorKind::NotADirectory => format!("{path}: a part of the path is not a directory"),
            ErrorKind::DirectoryNotEmpty => format!("{path} is a directory that is not empty"),
            ErrorKind::InvalidData => format!("{path} is not UTF-8 text"),
            _ => format!("cannot {action} {path}: {error}"),
        }
    }

    /// A symbolic link on the way to this path whose target lies outside the granted directory
    /// (the host refuses to follow it), described.
    fn escaping_link(&self) -> Option<String> {
        let rest = self.path.strip_prefix(&self.mount.path).ok()?;
        let mut at = self.mount.path.clone();
        for part in rest.components() {
            at.push(part);
            let Ok(meta) = std::fs::symlink_metadata(&at) else {
                return None;
            };
            if !meta.file_type().is_symlink() {
                continue;
            }
            let (link, mount) = (at.display(), self.mount.path.display());
            let Ok(target) = std::fs::read_link(&at) else {
                // The host does not even reveal a target that is an absolute path.
                return Some(format!(
                    "{}: the symbolic link {link} points outside the granted directory {mount}",
                    self.show()
                ));
            };
            let lands = normalise(&at.parent().unwrap_or(Path::new("/")).join(&target));
            if target.is_absolute() || !lands.starts_with(&self.mount.path) {
                return Some(format!(
                    "{}: the symbolic link {link} points to {}, outside the granted directory \
                     {mount}",
                    self.show(),
                    target.display(),
                ));
            }
        }
        None
    }
}

/// The granted directories, as WASI presents them.
pub struct Mounts(pub Vec<Mount>);

impl Mounts {
    /// Reads the preopened directories and whether each may be changed.
    pub fn granted() -> Self {
        // `.` is the first directory again, as the working directory: not a grant of its own.
        let mounts = get_directories()
            .into_iter()
            .filter(|(_, path)| path != ".")
            .map(|(descriptor, path)| Mount {
                path: normalise(Path::new(&path)),
                writable: descriptor
                    .get_flags()
                    .is_ok_and(|f| f.contains(DescriptorFlags::MUTATE_DIRECTORY)),
            })
            .collect();
        Self(mounts)
    }

    /// The granted directory `raw` lies in, with `raw` normalised: `.` and `..` are resolved by
    /// name, and a relative path is taken inside the first granted directory.
    pub fn resolve(&self, raw: &str) -> Result<Target<'_>, String> {
        let first = self.0.first().ok_or(
            "no directory is granted to this plugin: the operator lists them in moat.toml (`files`)",
        )?;
        if raw.is_empty() {
            return Err("the path is empty".into());
        }
        let path = normalise(&first.path.join(raw));
        let mount = self
            .0
            .iter()
            .filter(|m| path.starts_with(&m.path))
            .max_by_key(|m| m.path.components().count())
            .ok_or_else(|| {
                let resolved = if Path::new(raw) == path {
                    String::new()
                } else {
                    format!(" (it resolves to {})", path.display())
                };
                format!(
                    "{raw} is outside the granted directories{resolved}; granted: {}",
                    self.list()
                )
            })?;
        Ok(Target { path, mount })
    }

    fn list(&self) -> String {
        let names: Vec<String> = self
            .0
            .iter()
            .map(|m| m.path.display().to_string())
            .collect();
        names.join(", ")
    }
}

/// `path` with `.` dropped and each `..` removing the name before it (never above `/`).
pub fn normalise(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for part in path.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(name) => out.push(name),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}
