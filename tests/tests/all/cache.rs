//! The compiled-plugin cache: a hit is served from disk, and an entry moat did not write (or that
//! was changed) is never loaded.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use moat::supply::cache::Cache;
use moat::supply::source::Digest;
use moat_tests::{TempDir, engine, plugins};
use wasmtime::component::Component;

fn load(cache: &Cache, wasm: &[u8]) -> Component {
    cache.component(engine(), wasm, &Digest::of(wasm)).unwrap()
}

/// A cache in `dir` holding echo, whose entry then has one byte flipped: the cache, echo's
/// bytes, the entry's path and its tampered bytes.
fn cached_then_tampered(dir: &Path) -> (Cache, Vec<u8>, PathBuf, Vec<u8>) {
    let cache = Cache::open(dir).unwrap();
    let wasm = fs::read(plugins::ECHO).unwrap();
    load(&cache, &wasm);
    let [entry] = entries(dir).try_into().unwrap();
    let mut bytes = fs::read(&entry).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    fs::write(&entry, &bytes).unwrap();
    (cache, wasm, entry, bytes)
}

fn entries(dir: &Path) -> Vec<PathBuf> {
    let mut entries: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "cwasm"))
        .collect();
    entries.sort();
    entries
}

#[test]
fn a_second_load_is_a_hit_and_rewrites_nothing() {
    let dir = TempDir::new("cache-hit");
    let cache = Cache::open(&dir).unwrap();
    let wasm = fs::read(plugins::ECHO).unwrap();
    load(&cache, &wasm);
    let [entry] = entries(&dir).try_into().unwrap();
    let written = fs::metadata(&entry).unwrap().modified().unwrap();
    assert_eq!(
        fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
        0o700
    );

    let reopened = Cache::open(&dir).unwrap();
    let component = load(&reopened, &wasm);
    assert!(component.get_export_index(None, "echo").is_some());
    assert_eq!(fs::metadata(&entry).unwrap().modified().unwrap(), written);
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_tampered_entry_is_refused_and_replaced() {
    let dir = TempDir::new("cache-tampered");
    let (cache, wasm, entry, bytes) = cached_then_tampered(&dir);

    let component = load(&cache, &wasm);
    assert!(component.get_export_index(None, "echo").is_some());
    assert_ne!(
        fs::read(&entry).unwrap(),
        bytes,
        "the entry was compiled anew"
    );
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_entry_whose_seal_no_longer_matches_is_checked_in_full_and_kept_when_sound() {
    let dir = TempDir::new("cache-reseal");
    let cache = Cache::open(&dir).unwrap();
    let wasm = fs::read(plugins::ECHO).unwrap();
    load(&cache, &wasm);
    let [entry] = entries(&dir).try_into().unwrap();
    let seal = entry.with_extension("seal");
    let sealed = fs::read(&seal).unwrap();
    // A copy back in place: the same bytes, but another inode and other times.
    let bytes = fs::read(&entry).unwrap();
    fs::remove_file(&entry).unwrap();
    fs::write(&entry, &bytes).unwrap();
    fs::set_permissions(&entry, fs::Permissions::from_mode(0o600)).unwrap();

    let component = load(&cache, &wasm);
    assert!(component.get_export_index(None, "echo").is_some());
    assert_eq!(fs::read(&entry).unwrap(), bytes, "not compiled again");
    assert_ne!(fs::read(&seal).unwrap(), sealed, "sealed anew");
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_forged_seal_does_not_make_a_tampered_entry_load() {
    let dir = TempDir::new("cache-forged-seal");
    let (cache, wasm, entry, bytes) = cached_then_tampered(&dir);
    // Without the key, the best a forger can do is a seal of its own making.
    fs::write(entry.with_extension("seal"), [7u8; 32]).unwrap();

    load(&cache, &wasm);
    assert_ne!(
        fs::read(&entry).unwrap(),
        bytes,
        "the entry was compiled anew"
    );
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_entry_tagged_under_another_key_is_refused() {
    let (one, other) = (
        TempDir::new("cache-key-one"),
        TempDir::new("cache-key-other"),
    );
    let wasm = fs::read(plugins::ECHO).unwrap();
    load(&Cache::open(&one).unwrap(), &wasm);
    let other_cache = Cache::open(&other).unwrap();
    let [entry] = entries(&one).try_into().unwrap();
    let copied = other.join(entry.file_name().unwrap());
    fs::copy(&entry, &copied).unwrap();

    load(&other_cache, &wasm);
    assert_ne!(
        fs::read(&copied).unwrap(),
        fs::read(&entry).unwrap(),
        "the copied entry was compiled anew under this cache's key"
    );
    fs::remove_dir_all(&one).unwrap();
    fs::remove_dir_all(&other).unwrap();
}

#[test]
fn an_entry_others_could_write_is_refused() {
    let dir = TempDir::new("cache-writable");
    let cache = Cache::open(&dir).unwrap();
    let wasm = fs::read(plugins::ECHO).unwrap();
    load(&cache, &wasm);
    let [entry] = entries(&dir).try_into().unwrap();
    fs::set_permissions(&entry, fs::Permissions::from_mode(0o666)).unwrap();

    load(&cache, &wasm);
    let mode = fs::metadata(&entry).unwrap().permissions().mode() & 0o777;
    assert_eq!(
        mode, 0o600,
        "the refused entry was replaced by a private one"
    );
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_shared_cache_folder_is_refused() {
    let dir = TempDir::new("cache-shared");
    fs::create_dir_all(&dir).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).unwrap();
    let error = Cache::open(&dir)
        .err()
        .expect("a world-writable folder is refused");
    assert!(
        error.to_string().contains("writable by nobody else"),
        "{error:#}"
    );
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn clear_removes_entries_and_the_key() {
    let dir = TempDir::new("cache-clear");
    let cache = Cache::open(&dir).unwrap();
    load(&cache, &fs::read(plugins::ECHO).unwrap());
    assert_eq!(Cache::clear(&dir).unwrap(), 1, "one compiled plugin");
    assert!(entries(&dir).is_empty(), "its seal and the key went too");
}

#[test]
fn replicas_opening_an_empty_cache_at_once_all_sign_with_one_key() {
    let dir = TempDir::new("cache-race");
    const OPENERS: usize = 16;
    let start = std::sync::Barrier::new(OPENERS);
    let caches: Vec<Cache> = std::thread::scope(|scope| {
        let openers: Vec<_> = (0..OPENERS)
            .map(|_| {
                scope.spawn(|| {
                    start.wait();
                    Cache::open(&dir)
                })
            })
            .collect();
        openers
            .into_iter()
            .map(|opener| opener.join().unwrap().expect("every opener gets the cache"))
            .collect()
    });
    // What one of them stores, every other one trusts: they hold the same key.
    let wasm = fs::read(plugins::ECHO).unwrap();
    let digest = Digest::of(&wasm);
    load(&caches[0], &wasm);
    for (i, cache) in caches.iter().enumerate() {
        assert!(
            cache.cached(engine(), &digest).is_some(),
            "opener {i} signs with another key"
        );
    }
    let stray: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().contains(".tmp"))
        .collect();
    assert!(stray.is_empty(), "temp files left behind: {stray:?}");
}
