//! The graph's file: JSON Lines, one entity or relation per line, in the format of the MCP
//! reference memory server (`{"type":"entity","name":…,"entityType":…,"observations":[…]}`,
//! `{"type":"relation","from":…,"to":…,"relationType":…}`), so either can read the other's file.

use std::fs;
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};

use crate::exports::moat::memory::tools::{Entity, Graph, Relation};

/// The variable that names the file, as a guest path.
pub const FILE_VAR: &str = "MEMORY_FILE";
/// The file's name in the first granted directory when `MEMORY_FILE` is not set.
pub const DEFAULT_NAME: &str = "memory.jsonl";

#[derive(Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
enum Line {
    #[serde(rename_all = "camelCase")]
    Entity {
        name: String,
        entity_type: String,
        #[serde(default)]
        observations: Vec<String>,
    },
    #[serde(rename_all = "camelCase")]
    Relation {
        from: String,
        to: String,
        relation_type: String,
    },
}

/// How long a call waits for another call's change of the graph to end.
const LOCK_WAIT: Duration = Duration::from_secs(10);
/// A lock this old was left by a call stopped mid-change (its deadline, say): a change itself
/// takes milliseconds.
const LOCK_STALE: Duration = Duration::from_secs(10);

/// Where the graph lives.
pub struct Store {
    path: PathBuf,
}

/// The right to change the graph, held from reading it to writing it back: calls that run at
/// once (a model's parallel tool calls) would otherwise each write back the graph they read,
/// losing the others' changes. WASI has no file locks, but creating a file that must not exist
/// yet is atomic.
pub struct Lock {
    path: PathBuf,
}

impl Drop for Lock {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}

impl Store {
    /// The file `MEMORY_FILE` names (relative to the first granted directory), else
    /// `memory.jsonl` there.
    pub fn open() -> Result<Self, String> {
        // `.` is the first directory again, as the working directory: not a grant of its own.
        let granted: Vec<PathBuf> = wasip2::filesystem::preopens::get_directories()
            .into_iter()
            .filter(|(_, path)| path != ".")
            .map(|(_, path)| normalise(Path::new(&path)))
            .collect();
        let first = granted.first().ok_or(
            "no directory is granted to this plugin, and it keeps its graph in a file: the \
             operator grants one in moat.toml (`files`)",
        )?;
        let path = match std::env::var(FILE_VAR) {
            Ok(name) if !name.is_empty() => normalise(&first.join(name)),
            _ => first.join(DEFAULT_NAME),
        };
        if !granted
            .iter()
            .any(|dir| path.starts_with(dir) && path != *dir)
        {
            return Err(format!(
                "{FILE_VAR} names {}, which is not a file in a granted directory",
                path.display()
            ));
        }
        Ok(Self { path })
    }

    /// Waits for the other calls changing the graph, then holds it until the lock is dropped.
    pub fn lock(&self) -> Result<Lock, String> {
        let name = self.path.file_name().unwrap_or_default().to_string_lossy();
        let path = self.dir().join(format!(".{name}.lock"));
        let started = Instant::now();
        loop {
            match fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
            {
                Ok(_) => return Ok(Lock { path }),
                Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                    if is_stale(&path) {
                        let _ = fs::remove_file(&path);
                    } else if started.elapsed() > LOCK_WAIT {
                        return Err(format!(
                            "{} is being changed by another call that has not finished in {} s",
                            self.path.display(),
                            LOCK_WAIT.as_secs()
                        ));
                    } else {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
                Err(e) => return Err(self.error("change", &e)),
            }
        }
    }

    /// The graph in the file; none yet is an empty graph.
    pub fn load(&self) -> Result<Graph, String> {
        let text = match fs::read_to_string(&self.path) {
            Ok(text) => text,
            Err(e) if e.kind() == ErrorKind::NotFound => String::new(),
            Err(e) => return Err(self.error("read", &e)),
        };
        let mut graph = Graph {
            entities: Vec::new(),
            relations: Vec::new(),
        };
        for (number, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let line: Line = serde_json::from_str(line).map_err(|e| {
                format!(
                    "{} line {} is not an entity or relation: {e}",
                    self.path.display(),
                    number + 1
                )
            })?;
            match line {
                Line::Entity {
                    name,
                    entity_type,
                    observations,
                } => graph.entities.push(Entity {
                    name,
                    entity_type,
                    observations,
                }),
                Line::Relation {
                    from,
                    to,
                    relation_type,
                } => graph.relations.push(Relation {
                    from,
                    to,
                    relation_type,
                }),
            }
        }
        Ok(graph)
    }

    /// Writes the graph to a temporary file beside the store and renames it over the store, so
    /// that the file always holds a whole graph.
    pub fn save(&self, graph: &Graph) -> Result<(), String> {
        let mut text = String::new();
        let entities = graph.entities.iter().map(|e| Line::Entity {
            name: e.name.clone(),
            entity_type: e.entity_type.clone(),
            observations: e.observations.clone(),
        });
        let relations = graph.relations.iter().map(|r| Line::Relation {
            from: r.from.clone(),
            to: r.to.clone(),
            relation_type: r.relation_type.clone(),
        });
        for line in entities.chain(relations) {
            text.push_str(&serde_json::to_string(&line).expect("strings serialise"));
            text.push('\n');
        }
        let dir = self.dir();
        let name = self.path.file_name().unwrap_or_default().to_string_lossy();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let temp = dir.join(format!(".{name}.{nanos:09}.tmp"));
        let written = fs::File::create(&temp)
            .and_then(|mut file| {
                file.write_all(text.as_bytes())
                    .and_then(|()| file.sync_all())
            })
            .and_then(|()| fs::rename(&temp, &self.path));
        written.map_err(|e| {
            let _ = fs::remove_file(&temp);
            self.error("write", &e)
        })
    }

    fn dir(&self) -> &Path {
        self.path.parent().unwrap_or(Path::new("/"))
    }

    fn error(&self, action: &str, error: &std::io::Error) -> String {
        let path = self.path.display();
        match error.kind() {
            ErrorKind::PermissionDenied | ErrorKind::ReadOnlyFilesystem => format!(
                "cannot {action} {path}: permission denied (is its directory granted read-only?)"
            ),
            ErrorKind::NotFound => {
                format!("cannot {action} {path}: its directory does not exist")
            }
            _ => format!("cannot {action} {path}: {error}"),
        }
    }
}

/// Whether the lock at `path` was taken over [`LOCK_STALE`] ago.
fn is_stale(path: &Path) -> bool {
    fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|taken| SystemTime::now().duration_since(taken).ok())
        .is_some_and(|age| age > LOCK_STALE)
}

/// `path` with `.` dropped and each `..` removing the name before it (never above `/`).
fn normalise(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::from("/");
    for part in path.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(name) => out.push(name),
            _ => {}
        }
    }
    out
}
