//! What one instance of a component takes from the engine's pool: its core module instances,
//! linear memories and tables, counted from its bytes as the pooling allocator counts them
//! (each instantiation of a core module, with the memories and tables that module defines),
//! before anything is compiled. A component over the pool's limits is refused at once, with the
//! setting to raise, instead of after a compile of many seconds.

use anyhow::{Result, bail};
use wasmparser::{
    ComponentAlias, ComponentInstance, ComponentOuterAliasKind, Encoding, Instance, Parser, Payload,
};

use crate::sandbox::engine::PoolLimits;

/// The parts of the pool one instance of a component uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Footprint {
    pub core_instances: u32,
    pub memories: u32,
    pub tables: u32,
}

impl std::ops::AddAssign for Footprint {
    fn add_assign(&mut self, other: Self) {
        self.core_instances = self.core_instances.saturating_add(other.core_instances);
        self.memories = self.memories.saturating_add(other.memories);
        self.tables = self.tables.saturating_add(other.tables);
    }
}

/// One component being read: the footprint of each core module and component it defines (by
/// index), and of what it instantiates so far.
#[derive(Default)]
struct Frame {
    modules: Vec<Footprint>,
    components: Vec<Footprint>,
    total: Footprint,
}

impl Footprint {
    /// Counts the footprint of the component `wasm`.
    pub fn of(wasm: &[u8]) -> Result<Self> {
        let mut frames: Vec<Frame> = Vec::new();
        // The core module being read, if any: its memories and tables.
        let mut module: Option<Footprint> = None;
        for payload in Parser::new(0).parse_all(wasm) {
            match payload? {
                Payload::Version {
                    encoding: Encoding::Component,
                    ..
                } => frames.push(Frame::default()),
                Payload::Version {
                    encoding: Encoding::Module,
                    ..
                } => module = Some(Footprint::default()),
                Payload::MemorySection(section) if module.is_some() => {
                    module.as_mut().expect("in a module").memories += section.count();
                }
                Payload::TableSection(section) if module.is_some() => {
                    module.as_mut().expect("in a module").tables += section.count();
                }
                Payload::End(_) => match module.take() {
                    Some(done) => match frames.last_mut() {
                        Some(frame) => frame.modules.push(done),
                        None => bail!("a core module, not a component"),
                    },
                    None => {
                        let done = frames.pop().expect("a frame per component").total;
                        match frames.last_mut() {
                            Some(parent) => parent.components.push(done),
                            None => return Ok(done),
                        }
                    }
                },
                Payload::InstanceSection(section) => {
                    let frame = frames.last_mut().expect("in a component");
                    for instance in section {
                        if let Instance::Instantiate { module_index, .. } = instance? {
                            let module = frame.modules.get(module_index as usize);
                            frame.total += Footprint {
                                core_instances: 1,
                                ..module.copied().unwrap_or_default()
                            };
                        }
                    }
                }
                Payload::ComponentInstanceSection(section) => {
                    let frame = frames.last_mut().expect("in a component");
                    for instance in section {
                        if let ComponentInstance::Instantiate {
                            component_index, ..
                        } = instance?
                        {
                            let inner = frame.components.get(component_index as usize);
                            frame.total += inner.copied().unwrap_or_default();
                        }
                    }
                }
                Payload::ComponentAliasSection(section) => {
                    for alias in section {
                        if let ComponentAlias::Outer { kind, count, index } = alias? {
                            let outer = frames.len().checked_sub(1 + count as usize);
                            let outer = outer.and_then(|i| frames.get(i));
                            let found = |list: fn(&Frame) -> &Vec<Footprint>| {
                                outer.and_then(|f| list(f).get(index as usize)).copied()
                            };
                            let frame = frames.len() - 1;
                            match kind {
                                ComponentOuterAliasKind::CoreModule => {
                                    let item = found(|f| &f.modules).unwrap_or_default();
                                    frames[frame].modules.push(item);
                                }
                                ComponentOuterAliasKind::Component => {
                                    let item = found(|f| &f.components).unwrap_or_default();
                                    frames[frame].components.push(item);
                                }
                                _ => {}
                            }
                        }
                    }
                }
                // Modules and components imported, or aliased from an instance, are not counted
                // here; wasmtime's own check still applies when the component is compiled.
                _ => {}
            }
        }
        bail!("the component ends early")
    }

    /// Refuses a component this footprint is too big for under `limits`, naming the
    /// `[engine]` setting that would make room.
    pub fn check(&self, limits: &PoolLimits) -> Result<()> {
        let over = [
            (
                self.core_instances,
                limits.core_instances,
                "core module instances",
                "max_core_instances_per_plugin",
            ),
            (
                self.memories,
                limits.memories,
                "linear memories",
                "max_memories_per_plugin",
            ),
            (
                self.tables,
                limits.tables,
                "tables",
                "max_tables_per_plugin",
            ),
        ];
        for (has, may, what, setting) in over {
            if has > may {
                bail!(
                    "the component has {has} {what} per instance, more than the {may} moat's \
                     engine allows; raise `{setting}` in moat.toml's [engine] table to at least \
                     {has} (README, Limits, says what it costs)"
                );
            }
        }
        Ok(())
    }
}
