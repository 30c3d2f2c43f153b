//! The imports and exports a component's type declares, read from its bytes without compiling
//! or linking it: what `moat inspect` shows of a plugin that cannot load.

use anyhow::{Result, bail};
use wit_parser::decoding::{DecodedWasm, decode};

/// A component's imports and exports, by the names it gives them
/// (`wasi:cli/environment@0.2.9`, `echo`).
#[derive(Debug, Default, PartialEq)]
pub struct World {
    pub imports: Vec<String>,
    pub exports: Vec<String>,
}

impl World {
    /// Reads the world of the component `wasm`.
    pub fn of(wasm: &[u8]) -> Result<Self> {
        let DecodedWasm::Component(resolve, world) = decode(wasm)? else {
            bail!("a WIT package, not a component");
        };
        let world = &resolve.worlds[world];
        let names = |items: &wit_parser::IndexMap<wit_parser::WorldKey, wit_parser::WorldItem>| {
            items
                .iter()
                // Types a world imports are not imports of the component.
                .filter(|(_, item)| !matches!(item, wit_parser::WorldItem::Type { .. }))
                .map(|(key, _)| resolve.name_world_key(key))
                .collect()
        };
        Ok(Self {
            imports: names(&world.imports),
            exports: names(&world.exports),
        })
    }
}
