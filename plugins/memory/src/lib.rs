//! The `memory` plugin: a knowledge graph of entities, observations and relations, kept in a JSONL
//! file in a granted directory. Every call reads the file, changes the graph and writes it back
//! whole (holding a lock file beside it meanwhile), so nothing lives in the plugin between calls.

mod store;

use std::collections::HashSet;

use store::Store;

moat_guest::generate!("memory");

use exports::moat::memory::tools::{
    AddedObservations, Entity, Graph, Guest, ObservationAddition, ObservationDeletion, Relation,
};

struct Memory;

impl Guest for Memory {
    fn create_entities(entities: Vec<Entity>) -> Result<Vec<Entity>, String> {
        change(|graph| {
            let mut taken: HashSet<String> =
                graph.entities.iter().map(|e| e.name.clone()).collect();
            let mut created = Vec::new();
            for mut entity in entities {
                if taken.insert(entity.name.clone()) {
                    dedup(&mut entity.observations);
                    graph.entities.push(entity.clone());
                    created.push(entity);
                }
            }
            Ok(created)
        })
    }

    fn create_relations(relations: Vec<Relation>) -> Result<Vec<Relation>, String> {
        change(|graph| {
            let names: HashSet<&str> = graph.entities.iter().map(|e| e.name.as_str()).collect();
            let mut missing: Vec<&str> = Vec::new();
            for name in relations
                .iter()
                .flat_map(|r| [r.from.as_str(), r.to.as_str()])
            {
                if !names.contains(name) && !missing.contains(&name) {
                    missing.push(name);
                }
            }
            if !missing.is_empty() {
                let quoted: Vec<String> = missing.iter().map(|name| format!("{name:?}")).collect();
                return Err(format!(
                    "no entity is named {}; nothing was changed (create-entities makes {})",
                    or_list(&quoted),
                    if missing.len() == 1 { "it" } else { "them" }
                ));
            }
            let mut created = Vec::new();
            for relation in relations {
                if !graph.relations.iter().any(|r| same(r, &relation)) {
                    graph.relations.push(relation.clone());
                    created.push(relation);
                }
            }
            Ok(created)
        })
    }

    fn add_observations(
        observations: Vec<ObservationAddition>,
    ) -> Result<Vec<AddedObservations>, String> {
        change(|graph| {
            let mut results = Vec::new();
            for addition in observations {
                let entity = graph
                    .entities
                    .iter_mut()
                    .find(|e| e.name == addition.entity_name)
                    .ok_or_else(|| {
                        format!(
                            "no entity is named {:?}; nothing was changed (create-entities makes it)",
                            addition.entity_name
                        )
                    })?;
                let mut added = Vec::new();
                for content in addition.contents {
                    if !entity.observations.contains(&content) {
                        entity.observations.push(content.clone());
                        added.push(content);
                    }
                }
                results.push(AddedObservations {
                    entity_name: addition.entity_name,
                    added,
                });
            }
            Ok(results)
        })
    }

    fn delete_entities(entity_names: Vec<String>) -> Result<String, String> {
        change(|graph| {
            let names: HashSet<&str> = entity_names.iter().map(String::as_str).collect();
            let (entities, relations) = (graph.entities.len(), graph.relations.len());
            graph.entities.retain(|e| !names.contains(e.name.as_str()));
            graph
                .relations
                .retain(|r| !names.contains(r.from.as_str()) && !names.contains(r.to.as_str()));
            Ok(format!(
                "deleted {} entities and {} relations",
                entities - graph.entities.len(),
                relations - graph.relations.len()
            ))
        })
    }

    fn delete_observations(deletions: Vec<ObservationDeletion>) -> Result<String, String> {
        change(|graph| {
            let mut deleted = 0;
            for deletion in deletions {
                if let Some(entity) = graph
                    .entities
                    .iter_mut()
                    .find(|e| e.name == deletion.entity_name)
                {
                    let before = entity.observations.len();
                    entity
                        .observations
                        .retain(|o| !deletion.observations.contains(o));
                    deleted += before - entity.observations.len();
                }
            }
            Ok(format!("deleted {deleted} observations"))
        })
    }

    fn delete_relations(relations: Vec<Relation>) -> Result<String, String> {
        change(|graph| {
            let before = graph.relations.len();
            graph
                .relations
                .retain(|r| !relations.iter().any(|gone| same(r, gone)));
            Ok(format!(
                "deleted {} relations",
                before - graph.relations.len()
            ))
        })
    }

    fn read_graph() -> Result<Graph, String> {
        Store::open()?.load()
    }

    fn search_nodes(query: String) -> Result<Graph, String> {
        let query = query.to_lowercase();
        let found = |text: &str| text.to_lowercase().contains(&query);
        let graph = Store::open()?.load()?;
        Ok(subgraph(graph, |e| {
            found(&e.name) || found(&e.entity_type) || e.observations.iter().any(|o| found(o))
        }))
    }

    fn open_nodes(names: Vec<String>) -> Result<Graph, String> {
        let graph = Store::open()?.load()?;
        Ok(subgraph(graph, |e| names.contains(&e.name)))
    }
}

/// Loads the graph, lets `update` change it, and saves it unless `update` failed.
fn change<T>(update: impl FnOnce(&mut Graph) -> Result<T, String>) -> Result<T, String> {
    let store = Store::open()?;
    let _lock = store.lock()?;
    let mut graph = store.load()?;
    let result = update(&mut graph)?;
    store.save(&graph)?;
    Ok(result)
}

/// The entities `keep` picks, and the relations between two of them.
fn subgraph(graph: Graph, keep: impl Fn(&Entity) -> bool) -> Graph {
    let entities: Vec<Entity> = graph.entities.into_iter().filter(|e| keep(e)).collect();
    let names: HashSet<&str> = entities.iter().map(|e| e.name.as_str()).collect();
    let relations = graph
        .relations
        .into_iter()
        .filter(|r| names.contains(r.from.as_str()) && names.contains(r.to.as_str()))
        .collect();
    Graph {
        entities,
        relations,
    }
}

fn same(a: &Relation, b: &Relation) -> bool {
    a.from == b.from && a.to == b.to && a.relation_type == b.relation_type
}

/// `a`, `a or b`, `a, b or c`.
fn or_list(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} or {last}", rest.join(", ")),
    }
}

/// Removes repeated items, keeping the first of each.
fn dedup(items: &mut Vec<String>) {
    let mut seen = HashSet::new();
    items.retain(|item| seen.insert(item.clone()));
}

export!(Memory);
