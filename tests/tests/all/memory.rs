//! The `memory` plugin: the knowledge graph through every tool, kept in a JSONL file in a directory
//! granted through a real `moat.toml`, across calls and across a reload of moat.

use std::sync::Arc;

use moat::plugin::Plugin;
use moat_tests::plugins;
use serde_json::{Value, json};

use crate::filesystem::Fixture;
use crate::text::{assert_documented, fails, ok};

/// `memory` with the fixture's `rw` folder granted read-write at /data, and `extra` config lines.
fn memory(fixture: &Fixture, extra: &str) -> Arc<Plugin> {
    fixture.load(
        "memory",
        plugins::MEMORY,
        r#"{ host = "rw", guest = "/data", mode = "rw" }"#,
        extra,
    )
}

fn entity(name: &str, kind: &str, observations: &[&str]) -> Value {
    json!({"name": name, "entityType": kind, "observations": observations})
}

fn relation(from: &str, to: &str, kind: &str) -> Value {
    json!({"from": from, "to": to, "relationType": kind})
}

#[tokio::test]
async fn every_tool_is_documented() {
    let fixture = Fixture::new("memory-docs");
    let memory = memory(&fixture, "");
    assert_eq!(memory.tools.len(), 9);
    assert_documented(&memory);
}

#[tokio::test]
async fn the_graph_is_built_searched_and_pruned_through_every_tool() {
    let fixture = Fixture::new("memory-graph");
    let memory = memory(&fixture, "");
    let call = |tool: &'static str, args: Value| ok(&memory, tool, args);

    let created = call(
        "memory_create_entities",
        json!({"entities": [
            entity("Ada", "person", &["writes programs", "writes programs"]),
            entity("Analytical_Engine", "machine", &["designed by Babbage"]),
            entity("Ada", "robot", &[]),
        ]}),
    )
    .await;
    // A repeated name is ignored, and so is a repeated observation.
    assert_eq!(
        created,
        json!([
            entity("Ada", "person", &["writes programs"]),
            entity("Analytical_Engine", "machine", &["designed by Babbage"]),
        ])
    );
    let again = call(
        "memory_create_entities",
        json!({"entities": [entity("Ada", "person", &[]), entity("London", "city", &[])]}),
    )
    .await;
    assert_eq!(again, json!([entity("London", "city", &[])]));

    let relations = call(
        "memory_create_relations",
        json!({"relations": [
            relation("Ada", "Analytical_Engine", "programs"),
            relation("Ada", "London", "lives_in"),
        ]}),
    )
    .await;
    assert_eq!(relations.as_array().unwrap().len(), 2);
    let again = call(
        "memory_create_relations",
        json!({"relations": [relation("Ada", "London", "lives_in")]}),
    )
    .await;
    assert_eq!(again, json!([]));

    let added = call(
        "memory_add_observations",
        json!({"observations": [{"entityName": "Ada", "contents": ["writes programs", "born 1815"]}]}),
    )
    .await;
    assert_eq!(
        added,
        json!([{"entityName": "Ada", "added": ["born 1815"]}])
    );
    // An unknown entity fails the whole call, and the graph is unchanged.
    let message = fails(
        &memory,
        "memory_add_observations",
        json!({"observations": [
            {"entityName": "Ada", "contents": ["a mathematician"]},
            {"entityName": "Nobody", "contents": ["x"]},
        ]}),
    )
    .await;
    assert!(
        message.contains("no entity is named \"Nobody\""),
        "{message}"
    );

    let graph = call("memory_read_graph", json!({})).await;
    assert_eq!(
        graph["entities"][0],
        entity("Ada", "person", &["writes programs", "born 1815"])
    );

    // Search ignores case, and looks at names, types and observations.
    for (query, names) in [
        ("ADA", vec!["Ada"]),
        ("MACHINE", vec!["Analytical_Engine"]),
        ("babbage", vec!["Analytical_Engine"]),
        ("N", vec!["Ada", "Analytical_Engine", "London"]),
        ("zebra", vec![]),
    ] {
        let found = call("memory_search_nodes", json!({"query": query})).await;
        let found_names: Vec<&str> = found["entities"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap())
            .collect();
        assert_eq!(found_names, names, "{query}");
    }
    // Only relations whose two ends were found come along.
    let found = call("memory_search_nodes", json!({"query": "engine"})).await;
    assert_eq!(found["relations"], json!([]));
    let opened = call(
        "memory_open_nodes",
        json!({"names": ["Ada", "London", "Atlantis"]}),
    )
    .await;
    assert_eq!(
        opened,
        json!({
            "entities": [
                entity("Ada", "person", &["writes programs", "born 1815"]),
                entity("London", "city", &[]),
            ],
            "relations": [relation("Ada", "London", "lives_in")],
        })
    );

    let deleted = call(
        "memory_delete_observations",
        json!({"deletions": [{"entityName": "Ada", "observations": ["born 1815", "never said"]}]}),
    )
    .await;
    assert_eq!(deleted, "deleted 1 observations");
    let deleted = call(
        "memory_delete_relations",
        json!({"relations": [relation("Ada", "London", "lives_in"), relation("x", "y", "z")]}),
    )
    .await;
    assert_eq!(deleted, "deleted 1 relations");
    let deleted = call(
        "memory_delete_entities",
        json!({"entityNames": ["Analytical_Engine", "Atlantis"]}),
    )
    .await;
    assert_eq!(deleted, "deleted 1 entities and 1 relations");
    assert_eq!(
        call("memory_read_graph", json!({})).await,
        json!({
            "entities": [entity("Ada", "person", &["writes programs"]), entity("London", "city", &[])],
            "relations": [],
        })
    );

    // The file is the reference server's JSONL, and the atomic write left no temporary file.
    assert_eq!(
        fixture.read("rw/memory.jsonl"),
        "{\"type\":\"entity\",\"name\":\"Ada\",\"entityType\":\"person\",\"observations\":[\"writes programs\"]}\n\
         {\"type\":\"entity\",\"name\":\"London\",\"entityType\":\"city\",\"observations\":[]}\n"
    );
    let names: Vec<String> = std::fs::read_dir(fixture.root.join("rw"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(names.is_empty(), "temporary files left: {names:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn changes_made_at_once_are_all_kept() {
    // A model's parallel tool calls: each call reads the graph, changes it and writes it back.
    let fixture = Fixture::new("memory-concurrent");
    let memory = memory(&fixture, "");
    let mut calls = tokio::task::JoinSet::new();
    for n in 0..16 {
        let memory = memory.clone();
        calls.spawn(async move {
            let name = format!("E{n:02}");
            let created = json!({"entities": [entity(&name, "thing", &[])]});
            ok(&memory, "memory_create_entities", created).await;
            let observed = json!({"observations": [{"entityName": name, "contents": ["seen"]}]});
            ok(&memory, "memory_add_observations", observed).await;
        });
    }
    while let Some(call) = calls.join_next().await {
        call.unwrap();
    }
    let graph = ok(&memory, "memory_read_graph", json!({})).await;
    let mut names: Vec<&str> = graph["entities"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            assert_eq!(e["observations"], json!(["seen"]), "{e}");
            e["name"].as_str().unwrap()
        })
        .collect();
    names.sort();
    let expected: Vec<String> = (0..16).map(|n| format!("E{n:02}")).collect();
    assert_eq!(names, expected);
    let left: Vec<String> = std::fs::read_dir(fixture.root.join("rw"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".memory"))
        .collect();
    assert!(left.is_empty(), "lock or temporary files left: {left:?}");
}

#[tokio::test]
async fn a_lock_left_by_a_stopped_call_is_taken_over_once_stale() {
    let fixture = Fixture::new("memory-stale-lock");
    let memory = memory(&fixture, "");
    let lock = fixture.root.join("rw/.memory.jsonl.lock");
    let left = std::fs::File::create(&lock).unwrap();
    let long_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(60);
    left.set_modified(long_ago).unwrap();
    let created = json!({"entities": [entity("After", "thing", &[])]});
    ok(&memory, "memory_create_entities", created).await;
    assert!(!lock.exists(), "the stale lock is still there");
    assert!(fixture.read("rw/memory.jsonl").contains("\"After\""));
}

#[tokio::test]
async fn the_graph_survives_a_reload_of_moat() {
    let fixture = Fixture::new("memory-reload");
    let extra = r#"env = { MEMORY_FILE = "graphs/team.jsonl" }"#;
    std::fs::create_dir_all(fixture.root.join("rw/graphs")).unwrap();
    {
        let memory = memory(&fixture, extra);
        ok(
            &memory,
            "memory_create_entities",
            json!({"entities": [entity("Grace", "person", &["wrote a compiler"])]}),
        )
        .await;
    }
    assert!(fixture.read("rw/graphs/team.jsonl").contains("\"Grace\""));
    // A new registry from the same moat.toml, as after a restart.
    let memory = memory(&fixture, extra);
    ok(
        &memory,
        "memory_create_relations",
        json!({"relations": [relation("Grace", "Grace", "admires")]}),
    )
    .await;
    assert_eq!(
        ok(&memory, "memory_read_graph", json!({})).await,
        json!({
            "entities": [entity("Grace", "person", &["wrote a compiler"])],
            "relations": [relation("Grace", "Grace", "admires")],
        })
    );
}

#[tokio::test]
async fn bad_grants_and_bad_files_are_clear_errors() {
    let fixture = Fixture::new("memory-errors");

    let ungranted = fixture.load("memory", plugins::MEMORY, "", "");
    let message = fails(&ungranted, "memory_read_graph", json!({})).await;
    assert!(
        message.starts_with("no directory is granted to this plugin"),
        "{message}"
    );

    let escaping = memory(
        &fixture,
        r#"env = { MEMORY_FILE = "../outside/secret.txt" }"#,
    );
    let message = fails(&escaping, "memory_read_graph", json!({})).await;
    assert_eq!(
        message,
        "MEMORY_FILE names /outside/secret.txt, which is not a file in a granted directory"
    );

    // Read-only: the graph can be read, not changed.
    std::fs::write(
        fixture.root.join("ro/memory.jsonl"),
        "{\"type\":\"entity\",\"name\":\"Kept\",\"entityType\":\"note\",\"observations\":[]}\n",
    )
    .unwrap();
    let readonly = fixture.load(
        "memory",
        plugins::MEMORY,
        r#"{ host = "ro", guest = "/notes", mode = "ro" }"#,
        "",
    );
    let graph = ok(&readonly, "memory_read_graph", json!({})).await;
    assert_eq!(graph["entities"][0]["name"], "Kept");
    let message = fails(
        &readonly,
        "memory_create_entities",
        json!({"entities": [entity("New", "note", &[])]}),
    )
    .await;
    assert!(
        message.contains("cannot change /notes/memory.jsonl") && message.contains("read-only"),
        "{message}"
    );
    assert!(!fixture.read("ro/memory.jsonl").contains("New"));

    // A damaged file is reported with its line, and left as it is.
    let damaged = "{\"type\":\"entity\",\"name\":\"A\",\"entityType\":\"t\"}\nnot json\n";
    std::fs::write(fixture.root.join("rw/memory.jsonl"), damaged).unwrap();
    let memory = memory(&fixture, "");
    let message = fails(
        &memory,
        "memory_create_entities",
        json!({"entities": [entity("B", "t", &[])]}),
    )
    .await;
    assert!(
        message.starts_with("/data/memory.jsonl line 2 is not an entity or relation"),
        "{message}"
    );
    assert_eq!(fixture.read("rw/memory.jsonl"), damaged);
}

#[tokio::test]
async fn a_relation_to_an_entity_that_does_not_exist_is_refused() {
    let fixture = Fixture::new("memory-dangling");
    let memory = memory(&fixture, "");
    ok(
        &memory,
        "memory_create_entities",
        json!({"entities": [entity("Ada", "person", &[])]}),
    )
    .await;
    let message = fails(
        &memory,
        "memory_create_relations",
        json!({"relations": [relation("Ada", "Ada", "knows"), relation("Ada", "Nobody", "knows")]}),
    )
    .await;
    // The plugin names its sibling as WIT does; the model reads the tool's MCP name.
    assert_eq!(
        message,
        "no entity is named \"Nobody\"; nothing was changed (memory_create_entities makes it)"
    );
    assert_eq!(
        ok(&memory, "memory_read_graph", json!({})).await["relations"],
        json!([])
    );
}
