//! The `filesystem` plugin, granted real temp directories through a real `moat.toml`: every tool,
//! read-only against read-write grants, precise errors, and escapes through its own path arguments.
//!
//! Each test has a fixture of its own:
//!
//! ```text
//! rw/hello.txt            "one\ntwo\nthree\n"   granted read-write at /data
//! rw/sub/nested.txt       "nested"
//! ro/readme.txt           "read me"             granted read-only at /docs
//! outside/secret.txt      the secret no call may read
//! ```

use std::path::PathBuf;
use std::sync::Arc;

use moat::plugin::Plugin;
use moat::plugin::registry::Registry;
use moat_tests::{engine, plugins, try_call};
use serde_json::{Value, json};

use crate::text::{assert_documented, fails, ok};

const SECRET: &str = "s3cret-outside-the-grants";

/// A temp folder with the layout above, and the plugin loaded from a `moat.toml` in it.
pub(crate) struct Fixture {
    pub root: PathBuf,
}

impl Fixture {
    pub fn new(test: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("moat-fs-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let root = dir.canonicalize().unwrap();
        for (path, contents) in [
            ("rw/hello.txt", "one\ntwo\nthree\n"),
            ("rw/sub/nested.txt", "nested"),
            ("ro/readme.txt", "read me"),
            ("outside/secret.txt", SECRET),
        ] {
            let path = root.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, contents).unwrap();
        }
        Self { root }
    }

    /// Writes `moat.toml` granting `files` (TOML inline tables) to `plugin` at `wasm`, with
    /// `extra` lines, and loads the plugin as `moat serve --config` would.
    pub fn load(&self, plugin: &str, wasm: &str, files: &str, extra: &str) -> Arc<Plugin> {
        let config = format!("[plugins.{plugin}]\npath = {wasm:?}\nfiles = [{files}]\n{extra}\n");
        let path = self.root.join("moat.toml");
        std::fs::write(&path, config).unwrap();
        let sources =
            moat::serve::config::read(&path).unwrap_or_else(|e| panic!("moat.toml: {e:#}"));
        let (registry, errors) = Registry::load(engine(), &sources).expect("a linker");
        if let Some(error) = errors.into_iter().next() {
            panic!("loading {plugin}: {:#}", error.error);
        }
        registry.plugins()[0].clone()
    }

    /// The plugin with `rw` at /data (read-write) and `ro` at /docs (read-only).
    fn plugin(&self) -> Arc<Plugin> {
        self.load(
            "filesystem",
            plugins::FILESYSTEM,
            r#"{ host = "rw", guest = "/data", mode = "rw" }, { host = "ro", guest = "/docs", mode = "ro" }"#,
            "",
        )
    }

    pub fn read(&self, path: &str) -> String {
        std::fs::read_to_string(self.root.join(path)).unwrap()
    }

    fn names_in(&self, dir: &str) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.root.join(dir))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

#[tokio::test]
async fn every_tool_is_documented() {
    let fixture = Fixture::new("docs");
    let fs = fixture.plugin();
    let names: Vec<&str> = fs.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "filesystem_create_directory",
            "filesystem_directory_tree",
            "filesystem_edit_file",
            "filesystem_get_file_info",
            "filesystem_list_allowed_directories",
            "filesystem_list_directory",
            "filesystem_move_file",
            "filesystem_read_multiple_files",
            "filesystem_read_text_file",
            "filesystem_search_files",
            "filesystem_write_file",
        ]
    );
    assert_documented(&fs);
}

#[tokio::test]
async fn reads_files_whole_by_head_and_tail_and_several_at_once() {
    let fixture = Fixture::new("read");
    let fs = fixture.plugin();
    let read = |args: Value| ok(&fs, "filesystem_read_text_file", args);
    assert_eq!(
        read(json!({"path": "/data/hello.txt"})).await,
        "one\ntwo\nthree\n"
    );
    assert_eq!(
        read(json!({"path": "/data/hello.txt", "head": 2})).await,
        "one\ntwo\n"
    );
    assert_eq!(
        read(json!({"path": "/data/hello.txt", "tail": 1})).await,
        "three\n"
    );
    // A relative path is taken in the first granted directory; `.` and `..` inside it are fine.
    assert_eq!(
        read(json!({"path": "sub/../sub/./nested.txt"})).await,
        "nested"
    );
    assert_eq!(read(json!({"path": "/docs/readme.txt"})).await, "read me");

    std::fs::write(fixture.root.join("rw/binary.bin"), [0xff, 0xfe, 0x00]).unwrap();
    let read_fails = |args: Value| fails(&fs, "filesystem_read_text_file", args);
    for (args, expected) in [
        (
            json!({"path": "/data/hello.txt", "head": 1, "tail": 1}),
            "head or tail, not both",
        ),
        (
            json!({"path": "/data/missing.txt"}),
            "/data/missing.txt: no such file or directory",
        ),
        (
            json!({"path": "/data/sub"}),
            "/data/sub is a directory, not a file",
        ),
        (
            json!({"path": "/data/binary.bin"}),
            "/data/binary.bin is not UTF-8 text",
        ),
        (json!({"path": ""}), "the path is empty"),
    ] {
        let message = read_fails(args.clone()).await;
        assert!(message.contains(expected), "{args}: {message}");
    }

    let files = ok(
        &fs,
        "filesystem_read_multiple_files",
        json!({"paths": ["/data/sub/nested.txt", "/data/nope.txt", "/docs/readme.txt"]}),
    )
    .await;
    assert_eq!(
        files,
        json!([
            {"path": "/data/sub/nested.txt", "text": {"ok": "nested"}},
            {"path": "/data/nope.txt", "text": {"err": "/data/nope.txt: no such file or directory"}},
            {"path": "/docs/readme.txt", "text": {"ok": "read me"}},
        ])
    );
}

#[tokio::test]
async fn writes_edits_creates_and_moves_in_a_writable_grant() {
    let fixture = Fixture::new("write");
    let fs = fixture.plugin();

    let message = ok(
        &fs,
        "filesystem_write_file",
        json!({"path": "/data/new.txt", "content": "alpha\nbeta\n"}),
    )
    .await;
    assert_eq!(message, "wrote 11 bytes to /data/new.txt");
    assert_eq!(fixture.read("rw/new.txt"), "alpha\nbeta\n");
    ok(
        &fs,
        "filesystem_write_file",
        json!({"path": "/data/new.txt", "content": "alpha\nbeta\ngamma\n"}),
    )
    .await;
    assert_eq!(fixture.read("rw/new.txt"), "alpha\nbeta\ngamma\n");
    // The temporary file of the atomic write is gone.
    assert_eq!(fixture.names_in("rw"), ["hello.txt", "new.txt", "sub"]);
    let message = fails(
        &fs,
        "filesystem_write_file",
        json!({"path": "/data/no/such/dir/f.txt", "content": "x"}),
    )
    .await;
    assert!(
        message.contains("the directory /data/no/such/dir does not exist"),
        "{message}"
    );

    // A dry run shows the diff and leaves the file alone.
    let edits = json!([
        {"oldText": "two", "newText": "TWO"},
        {"oldText": "TWO\nthree", "newText": "TWO\n3"},
    ]);
    let diff = ok(
        &fs,
        "filesystem_edit_file",
        json!({"path": "/data/hello.txt", "edits": edits, "dryRun": true}),
    )
    .await;
    let diff = diff.as_str().unwrap();
    let diff = diff
        .strip_prefix("Dry run: no changes were written.\n")
        .unwrap_or_else(|| panic!("a dry run says so first: {diff}"));
    assert!(
        diff.starts_with("--- /data/hello.txt\n+++ /data/hello.txt\n"),
        "{diff}"
    );
    assert!(diff.contains("\n-two\n-three\n+TWO\n+3\n"), "{diff}");
    assert_eq!(fixture.read("rw/hello.txt"), "one\ntwo\nthree\n");
    let applied = ok(
        &fs,
        "filesystem_edit_file",
        json!({"path": "/data/hello.txt", "edits": edits}),
    )
    .await;
    assert_eq!(applied.as_str().unwrap(), diff);
    assert_eq!(fixture.read("rw/hello.txt"), "one\nTWO\n3\n");

    // A failed edit writes nothing, even when the edits before it matched.
    std::fs::write(fixture.root.join("rw/twice.txt"), "x = 1\nx = 1\n").unwrap();
    for (edits, expected) in [
        (
            json!([{"oldText": "x = 1", "newText": "x = 2"}]),
            "edit 1: oldText occurs 2 times in /data/twice.txt",
        ),
        (
            json!([{"oldText": "x = 1\nx", "newText": "y"}, {"oldText": "absent", "newText": "z"}]),
            "edit 2: oldText was not found in /data/twice.txt after the edits before it",
        ),
    ] {
        let message = fails(
            &fs,
            "filesystem_edit_file",
            json!({"path": "/data/twice.txt", "edits": edits}),
        )
        .await;
        assert!(message.contains(expected), "{message}");
        assert_eq!(fixture.read("rw/twice.txt"), "x = 1\nx = 1\n");
    }
    // An empty oldText breaks the schema's minLength: refused before the plugin runs.
    let refused = try_call(
        &fs,
        "filesystem_edit_file",
        json!({"path": "/data/twice.txt", "edits": [{"oldText": "", "newText": "z"}]}),
    )
    .await
    .unwrap_err();
    assert!(refused.contains("edits[0].oldText: "), "{refused}");

    let created = ok(
        &fs,
        "filesystem_create_directory",
        json!({"path": "/data/a/b/c"}),
    )
    .await;
    assert_eq!(created, "created /data/a/b/c");
    assert!(fixture.root.join("rw/a/b/c").is_dir());
    let again = ok(
        &fs,
        "filesystem_create_directory",
        json!({"path": "/data/a/b/c"}),
    )
    .await;
    assert_eq!(again, "/data/a/b/c already exists");
    let message = fails(
        &fs,
        "filesystem_create_directory",
        json!({"path": "/data/hello.txt/inner"}),
    )
    .await;
    assert!(message.contains("/data/hello.txt/inner"), "{message}");

    let moved = ok(
        &fs,
        "filesystem_move_file",
        json!({"source": "/data/new.txt", "destination": "/data/a/renamed.txt"}),
    )
    .await;
    assert_eq!(moved, "moved /data/new.txt to /data/a/renamed.txt");
    assert_eq!(fixture.read("rw/a/renamed.txt"), "alpha\nbeta\ngamma\n");
    assert!(!fixture.root.join("rw/new.txt").exists());
    for (args, expected) in [
        (
            json!({"source": "/data/hello.txt", "destination": "/data/a/renamed.txt"}),
            "/data/a/renamed.txt already exists",
        ),
        (
            json!({"source": "/data/gone.txt", "destination": "/data/x.txt"}),
            "/data/gone.txt: no such file or directory",
        ),
        (
            json!({"source": "/data/a", "destination": "/data/a/b/inside"}),
            "cannot move /data/a into itself",
        ),
        (
            json!({"source": "/data/hello.txt", "destination": "/docs/hello.txt"}),
            "/docs/hello.txt is in /docs, which is granted read-only",
        ),
    ] {
        let message = fails(&fs, "filesystem_move_file", args.clone()).await;
        assert!(message.contains(expected), "{args}: {message}");
    }
}

#[tokio::test]
async fn a_read_only_grant_is_read_but_never_changed() {
    let fixture = Fixture::new("ro");
    let fs = fixture.plugin();
    let readonly = "/docs/readme.txt is in /docs, which is granted read-only";
    for (tool, args, expected) in [
        (
            "filesystem_write_file",
            json!({"path": "/docs/readme.txt", "content": "changed"}),
            readonly,
        ),
        (
            "filesystem_write_file",
            json!({"path": "/docs/new.txt", "content": "new"}),
            "/docs/new.txt is in /docs, which is granted read-only",
        ),
        (
            "filesystem_edit_file",
            json!({"path": "/docs/readme.txt", "edits": [{"oldText": "read", "newText": "write"}]}),
            readonly,
        ),
        (
            "filesystem_create_directory",
            json!({"path": "/docs/new"}),
            "/docs/new is in /docs, which is granted read-only",
        ),
        (
            "filesystem_move_file",
            json!({"source": "/docs/readme.txt", "destination": "/docs/moved.txt"}),
            readonly,
        ),
        (
            "filesystem_move_file",
            json!({"source": "/docs/readme.txt", "destination": "/data/moved.txt"}),
            readonly,
        ),
    ] {
        let message = fails(&fs, tool, args.clone()).await;
        assert!(message.contains(expected), "{tool} {args}: {message}");
    }
    assert_eq!(fixture.names_in("ro"), ["readme.txt"]);
    assert_eq!(fixture.read("ro/readme.txt"), "read me");
    // A dry run changes nothing, so it is allowed.
    let diff = ok(
        &fs,
        "filesystem_edit_file",
        json!({"path": "/docs/readme.txt", "edits": [{"oldText": "read", "newText": "write"}], "dryRun": true}),
    )
    .await;
    assert!(diff.as_str().unwrap().contains("-read me"), "{diff}");
    let info = ok(
        &fs,
        "filesystem_get_file_info",
        json!({"path": "/docs/readme.txt"}),
    )
    .await;
    assert_eq!(info["readOnly"], true);
}

#[tokio::test]
async fn lists_walks_searches_and_describes() {
    let fixture = Fixture::new("list");
    let fs = fixture.plugin();
    std::fs::write(fixture.root.join("rw/big.log"), vec![b'x'; 2048]).unwrap();
    std::fs::create_dir_all(fixture.root.join("rw/sub/deeper")).unwrap();
    std::fs::write(fixture.root.join("rw/sub/deeper/deep.txt"), "deep").unwrap();

    let listing = ok(&fs, "filesystem_list_directory", json!({"path": "/data"})).await;
    assert_eq!(
        listing,
        "[FILE] big.log (2048 bytes, 2.0 KiB)\n[FILE] hello.txt (14 bytes)\n[DIR]  sub\n\
         2 files, 1 directory; 2062 bytes, 2.0 KiB in files"
    );
    let by_size = ok(
        &fs,
        "filesystem_list_directory",
        json!({"path": "/data", "sortBy": "size"}),
    )
    .await;
    assert!(
        by_size.as_str().unwrap().starts_with("[FILE] big.log"),
        "{by_size}"
    );
    let message = fails(
        &fs,
        "filesystem_list_directory",
        json!({"path": "/data/hello.txt"}),
    )
    .await;
    assert_eq!(message, "/data/hello.txt is not a directory");

    let tree = ok(&fs, "filesystem_directory_tree", json!({"path": "/data"})).await;
    assert_eq!(
        tree,
        json!({"entries": [
            {"path": "big.log", "kind": "file", "size": 2048},
            {"path": "hello.txt", "kind": "file", "size": 14},
            {"path": "sub", "kind": "directory", "size": null},
            {"path": "sub/deeper", "kind": "directory", "size": null},
            {"path": "sub/deeper/deep.txt", "kind": "file", "size": 4},
            {"path": "sub/nested.txt", "kind": "file", "size": 6},
        ], "truncated": false})
    );
    let shallow = ok(
        &fs,
        "filesystem_directory_tree",
        json!({"path": "/data", "depth": 1, "exclude": ["*.log"]}),
    )
    .await;
    assert_eq!(
        shallow,
        json!({"entries": [
            {"path": "hello.txt", "kind": "file", "size": 14},
            {"path": "sub", "kind": "directory", "size": null},
        ], "truncated": true})
    );

    let search = |args: Value| ok(&fs, "filesystem_search_files", args);
    assert_eq!(
        search(json!({"path": "/data", "pattern": "*.txt"})).await,
        json!([
            "/data/hello.txt",
            "/data/sub/deeper/deep.txt",
            "/data/sub/nested.txt"
        ])
    );
    assert_eq!(
        search(json!({"path": "/data", "pattern": "sub/*.txt"})).await,
        json!(["/data/sub/nested.txt"])
    );
    assert_eq!(
        search(json!({"path": "/data", "pattern": "**/*.txt", "exclude": ["deeper"], "limit": 5}))
            .await,
        json!(["/data/hello.txt", "/data/sub/nested.txt"])
    );
    assert_eq!(
        search(json!({"path": "/data", "pattern": "*.txt", "limit": 1})).await,
        json!(["/data/hello.txt"])
    );
    let message = fails(
        &fs,
        "filesystem_search_files",
        json!({"path": "/data", "pattern": "a[b"}),
    )
    .await;
    assert!(
        message.starts_with("invalid glob pattern \"a[b\""),
        "{message}"
    );

    let info = ok(
        &fs,
        "filesystem_get_file_info",
        json!({"path": "/data/big.log"}),
    )
    .await;
    assert_eq!(info["path"], "/data/big.log");
    assert_eq!(info["kind"], "file");
    assert_eq!(info["size"], 2048);
    assert_eq!(info["readOnly"], false);
    let modified = info["modified"].as_str().expect("a modification time");
    assert!(
        modified.ends_with('Z') && modified.contains('T'),
        "{modified}"
    );
    let dir = ok(
        &fs,
        "filesystem_get_file_info",
        json!({"path": "/data/sub/"}),
    )
    .await;
    assert_eq!(dir["kind"], "directory");

    let allowed = ok(&fs, "filesystem_list_allowed_directories", json!({})).await;
    assert_eq!(
        allowed,
        json!([{"path": "/data", "readOnly": false}, {"path": "/docs", "readOnly": true}])
    );
}

#[tokio::test]
async fn paths_that_leave_the_grants_fail_and_say_why() {
    let fixture = Fixture::new("escape");
    let fs = fixture.plugin();
    let outside = fixture.root.join("outside");
    std::os::unix::fs::symlink(&outside, fixture.root.join("rw/out")).unwrap();
    std::os::unix::fs::symlink("../outside/secret.txt", fixture.root.join("rw/rel-out")).unwrap();
    let secret = outside.join("secret.txt").display().to_string();

    let outside_grants = "is outside the granted directories";
    for (tool, args, expected) in [
        (
            "filesystem_read_text_file",
            json!({"path": "/data/../outside/secret.txt"}),
            "/data/../outside/secret.txt is outside the granted directories (it resolves to /outside/secret.txt); granted: /data, /docs",
        ),
        (
            "filesystem_read_text_file",
            json!({"path": "../outside/secret.txt"}),
            outside_grants,
        ),
        (
            "filesystem_read_text_file",
            json!({"path": secret}),
            outside_grants,
        ),
        (
            "filesystem_read_text_file",
            json!({"path": "/etc/passwd"}),
            outside_grants,
        ),
        (
            "filesystem_read_text_file",
            json!({"path": "/data/out/secret.txt"}),
            "/data/out/secret.txt: the symbolic link /data/out points outside the granted directory /data",
        ),
        (
            "filesystem_read_text_file",
            json!({"path": "/data/rel-out"}),
            "/data/rel-out: the symbolic link /data/rel-out points to ../outside/secret.txt, outside the granted directory /data",
        ),
        (
            "filesystem_write_file",
            json!({"path": "/data/out/planted.txt", "content": "x"}),
            "the symbolic link /data/out points outside",
        ),
        (
            "filesystem_write_file",
            json!({"path": "/data/../outside/planted.txt", "content": "x"}),
            outside_grants,
        ),
        (
            "filesystem_list_directory",
            json!({"path": "/data/out"}),
            "the symbolic link /data/out points outside",
        ),
        (
            "filesystem_list_directory",
            json!({"path": "/"}),
            "/ is outside the granted directories",
        ),
        (
            "filesystem_directory_tree",
            json!({"path": "/data/.."}),
            outside_grants,
        ),
        (
            "filesystem_search_files",
            json!({"path": "/tmp", "pattern": "*"}),
            outside_grants,
        ),
        (
            "filesystem_move_file",
            json!({"source": "/data/hello.txt", "destination": "/data/../outside/stolen.txt"}),
            outside_grants,
        ),
        (
            "filesystem_get_file_info",
            json!({"path": "/data/out/secret.txt"}),
            "the symbolic link /data/out points outside",
        ),
    ] {
        let message = fails(&fs, tool, args.clone()).await;
        assert!(message.contains(expected), "{tool} {args}: {message}");
        assert!(!message.contains(SECRET), "{tool} {args} leaked: {message}");
    }

    // Walks list a symbolic link as one and never follow it.
    let found = ok(
        &fs,
        "filesystem_search_files",
        json!({"path": "/data", "pattern": "*secret*"}),
    )
    .await;
    assert_eq!(found, json!([]));
    let listing = ok(&fs, "filesystem_list_directory", json!({"path": "/data"})).await;
    assert!(
        listing.as_str().unwrap().contains("[LINK] out\n"),
        "{listing}"
    );

    // Nothing outside the grants changed, and the plugin still answers.
    assert_eq!(fixture.names_in("outside"), ["secret.txt"]);
    assert_eq!(fixture.read("outside/secret.txt"), SECRET);
    assert_eq!(
        ok(
            &fs,
            "filesystem_read_text_file",
            json!({"path": "/data/hello.txt"})
        )
        .await,
        "one\ntwo\nthree\n"
    );
}

#[tokio::test]
async fn without_a_grant_every_tool_says_so() {
    let fixture = Fixture::new("none");
    let fs = fixture.load("filesystem", plugins::FILESYSTEM, "", "");
    let message = fails(
        &fs,
        "filesystem_read_text_file",
        json!({"path": "/data/hello.txt"}),
    )
    .await;
    assert!(
        message.starts_with("no directory is granted to this plugin"),
        "{message}"
    );
    let allowed = ok(&fs, "filesystem_list_allowed_directories", json!({})).await;
    assert_eq!(allowed, json!([]));
}
