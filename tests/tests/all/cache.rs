//! The compiled-plugin cache: a hit is served from disk, and an entry moat did not write (or that
//! was changed) is never loaded.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use moat::cache::Cache;
use moat::source::Digest;
use moat_tests::{engine, plugins};
use wasmtime::component::Component;

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("moat-cache-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    dir
}

fn load(cache: &Cache, wasm: &[u8]) -> Component {
    cache.component(engine(), wasm, &Digest::of(wasm)).unwrap()
}

fn entries(dir: &PathBuf) -> Vec<PathBuf> {
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
    let dir = temp_dir("hit");
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
    let dir = temp_dir("tampered");
    let cache = Cache::open(&dir).unwrap();
    let wasm = fs::read(plugins::ECHO).unwrap();
    load(&cache, &wasm);
    let [entry] = entries(&dir).try_into().unwrap();
    let mut bytes = fs::read(&entry).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    fs::write(&entry, &bytes).unwrap();

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
fn an_entry_tagged_under_another_key_is_refused() {
    let (one, other) = (temp_dir("key-one"), temp_dir("key-other"));
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
    let dir = temp_dir("writable");
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
    let dir = temp_dir("shared");
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
    let dir = temp_dir("clear");
    let cache = Cache::open(&dir).unwrap();
    load(&cache, &fs::read(plugins::ECHO).unwrap());
    assert_eq!(Cache::clear(&dir).unwrap(), 2);
    assert!(entries(&dir).is_empty());
}
