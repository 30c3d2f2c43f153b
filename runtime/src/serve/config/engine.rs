//! `[engine]`: how much of the engine's pool one instance of a plugin may take.

use std::path::Path;

use anyhow::{Result, bail};
use schemars::JsonSchema;
use serde::Deserialize;

use crate::sandbox::engine::PoolLimits;

/// `[engine]`: the parts of the engine's pool one instance of a plugin may take. Raising them
/// costs no memory: they cap an instance's share of the pool's totals, which grow with them.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct EngineEntry {
    /// Core module instances one instance of a plugin may hold: Rust components have a few,
    /// componentize-py's dozens (one per extension library).
    #[schemars(range(min = 1, max = 10000), extend("default" = PoolLimits::default().core_instances))]
    max_core_instances_per_plugin: Option<u32>,
    /// Linear memories one instance of a plugin may have.
    #[schemars(range(min = 1, max = 100), extend("default" = PoolLimits::default().memories))]
    max_memories_per_plugin: Option<u32>,
    /// Tables one instance of a plugin may have.
    #[schemars(range(min = 1, max = 1000), extend("default" = PoolLimits::default().tables))]
    max_tables_per_plugin: Option<u32>,
}

/// The pool limits `entry` gives, moat's defaults where unset; `path` names the file in errors.
pub(super) fn limits(entry: Option<EngineEntry>, path: &Path) -> Result<PoolLimits> {
    let entry = entry.unwrap_or_default();
    let defaults = PoolLimits::default();
    let limits = PoolLimits {
        core_instances: entry
            .max_core_instances_per_plugin
            .unwrap_or(defaults.core_instances),
        memories: entry.max_memories_per_plugin.unwrap_or(defaults.memories),
        tables: entry.max_tables_per_plugin.unwrap_or(defaults.tables),
    };
    let bounds = [
        (
            "max_core_instances_per_plugin",
            limits.core_instances,
            10000,
        ),
        ("max_memories_per_plugin", limits.memories, 100),
        ("max_tables_per_plugin", limits.tables, 1000),
    ];
    for (key, value, most) in bounds {
        if !(1..=most).contains(&value) {
            bail!(
                "in {}: [engine] {key} = {value}: give 1 to {most}",
                path.display()
            );
        }
    }
    Ok(limits)
}
