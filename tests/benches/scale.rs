//! moat with many plugins: what a loaded plugin costs in memory, and how long listing 1000 tools
//! takes.
//!
//! * **memory**: the process's resident set before and after loading N copies of a plugin from a
//!   warm compiled-plugin cache (as a restart, or a reload of unchanged bytes under new names,
//!   loads them), divided by N.
//! * **listing**: 1000 tools (30 copies of `shapes`, 33 tools each, and 5 of `echo`) walked in
//!   `tools/list` pages of 100, each tool turned into its MCP form and every page serialized to
//!   JSON, as the server does; in-process, without a transport.
//!
//! Run with `cargo bench -p moat-tests --bench scale` (not part of `./dev bench`, which runs the
//! harness in `tests/perf/`); `MOAT_BENCH_LISTINGS` sets the number of full listings measured
//! (default 200).

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use moat::access::Principal;
use moat::mcp::catalogue::{Catalogue, DEFAULT_PAGE_SIZE};
use moat::serve::reload::{Loader, Served};
use moat::supply::cache::Cache;
use moat_tests::{engine, plugins};
use rmcp::model::{ListToolsResult, Tool};

fn main() {
    let listings: usize = std::env::var("MOAT_BENCH_LISTINGS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(200);
    let dir = std::env::temp_dir().join(format!("moat-bench-scale-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();

    println!("memory per loaded plugin (resident set, warm compiled-plugin cache):");
    for (name, wasm, copies) in [("echo", plugins::ECHO, 50), ("shapes", plugins::SHAPES, 30)] {
        let served = served(&dir, name, &vec![wasm; copies]);
        let cache = || Some(Cache::open(&dir.join("cache")).unwrap());
        // Compile once so that the measured load only reads the cache, as a restart does.
        drop(Loader::new(engine().clone(), cache()).load(&served.sources().unwrap()[..1]));
        let before = resident_kib();
        let mut loader = Loader::new(engine().clone(), cache());
        let outcome = loader.load(&served.sources().unwrap()).unwrap();
        assert!(outcome.failed.is_empty());
        let after = resident_kib();
        println!(
            "  {name:>6}: {copies} copies, {:>6} KiB more, {:>5} KiB per plugin ({} KiB file)",
            after - before,
            (after - before) / copies as i64,
            std::fs::metadata(wasm).unwrap().len() / 1024,
        );
        drop(outcome);
        drop(loader);
    }

    let mut wasms = vec![plugins::SHAPES; 30];
    wasms.extend([plugins::ECHO; 5]);
    let served = served(&dir, "mixed", &wasms);
    let cache = Some(Cache::open(&dir.join("cache")).unwrap());
    let outcome = Loader::new(engine().clone(), cache)
        .load(&served.sources().unwrap())
        .unwrap();
    assert_eq!(outcome.registry.tools().count(), 1000);
    let catalogue = Catalogue::new(Arc::new(outcome.registry), DEFAULT_PAGE_SIZE);

    let mut times = Vec::with_capacity(listings);
    let mut bytes = 0;
    for _ in 0..listings {
        let started = Instant::now();
        let (count, size) = list_all(&catalogue);
        times.push(started.elapsed());
        assert_eq!(count, 1000);
        bytes = size;
    }
    times.sort();
    let micros = |i: usize| times[i].as_secs_f64() * 1e6;
    println!(
        "\nlisting 1000 tools in pages of {DEFAULT_PAGE_SIZE} ({} KiB of JSON), {listings} times:",
        bytes / 1024
    );
    println!(
        "  p50 {:.0} µs, p99 {:.0} µs",
        micros(listings / 2),
        micros(listings * 99 / 100)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A moat.toml serving `wasms` under the names `{prefix}NN`.
fn served(dir: &Path, prefix: &str, wasms: &[&str]) -> Served {
    let config: String = wasms
        .iter()
        .enumerate()
        .map(|(i, wasm)| format!("[plugins.{prefix}{i:02}]\npath = {wasm:?}\n"))
        .collect();
    let path = dir.join(format!("{prefix}.toml"));
    std::fs::write(&path, config).unwrap();
    Served {
        paths: vec![],
        config: Some(path),
        secrets: None,
        ..Default::default()
    }
}

/// Walks every page as a client would; returns the tools and the bytes of JSON seen.
fn list_all(catalogue: &Catalogue) -> (usize, usize) {
    let mut cursor: Option<String> = None;
    let (mut count, mut bytes) = (0, 0);
    loop {
        let registry = catalogue.current();
        let page = catalogue
            .page(
                &registry,
                &Principal::stdio("stdio"),
                &Default::default(),
                cursor.as_deref(),
            )
            .unwrap();
        let tools = page.tools.iter().map(|(_, tool)| {
            let mut mcp = Tool::new(
                tool.name.clone(),
                tool.description.clone(),
                tool.input_schema.clone(),
            );
            mcp.output_schema = tool.output_schema.clone();
            mcp
        });
        let mut result = ListToolsResult::with_all_items(tools.collect());
        result.next_cursor = page.next_cursor;
        count += result.tools.len();
        bytes += serde_json::to_vec(&result).unwrap().len();
        match result.next_cursor {
            Some(next) => cursor = Some(next),
            None => return (count, bytes),
        }
    }
}

/// This process's resident set, from `/proc/self/status`.
fn resident_kib() -> i64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/self/status")
}
