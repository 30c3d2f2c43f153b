//! Components written out instruction by instruction, for what a Rust guest cannot be compiled
//! into: attacks the hostile suite loads like any plugin file, and a tail call (`tiers.rs`: Winch
//! cannot compile one).

use std::sync::OnceLock;

use wasm_encoder::{
    Alias, CanonicalFunctionSection, CanonicalOption, CodeSection, Component,
    ComponentAliasSection, ComponentExportKind, ComponentExportSection, ComponentTypeSection,
    ComponentValType, ConstExpr, DataSection, EntityType, ExportKind, ExportSection, Function,
    FunctionSection, ImportSection, InstanceSection, MemorySection, MemoryType, Module, ModuleArg,
    ModuleSection, PrimitiveValType, TypeSection, ValType,
};

/// 64 KiB pages of 24 MiB: one such growth fits a 32 MiB limit, two do not.
const GROWTH_PAGES: i32 = 384;

/// A component of two core modules, each with a linear memory of its own (moat's pooling
/// allocator takes one memory per module, a few per component). Its `grow-both` export grows
/// each memory by 24 MiB, so that each alone stays under a 32 MiB limit while the instance holds
/// 48 MiB; `ok` returns "ok". Written once per test run; its path.
pub fn multi_memory() -> &'static str {
    static PATH: OnceLock<String> = OnceLock::new();
    PATH.get_or_init(|| {
        let path =
            std::env::temp_dir().join(format!("moat-multi-memory-{}.wasm", std::process::id()));
        std::fs::write(&path, multi_memory_component()).expect("writing the component");
        path.to_string_lossy().into_owned()
    })
}

fn one_memory() -> MemorySection {
    let mut memories = MemorySection::new();
    memories.memory(MemoryType {
        minimum: 1,
        maximum: None,
        memory64: false,
        shared: false,
        page_size_log2: None,
    });
    memories
}

/// Grows the module's memory, answering its size in pages before (-1 if refused).
fn grow_own_memory() -> Function {
    let mut grow = Function::new([]);
    grow.instructions()
        .i32_const(GROWTH_PAGES)
        .memory_grow(0)
        .end();
    grow
}

/// The second memory: a module whose `grow` grows it.
fn helper_module() -> Module {
    let mut types = TypeSection::new();
    types.ty().function([], [ValType::I32]);
    let mut functions = FunctionSection::new();
    functions.function(0);
    let mut exports = ExportSection::new();
    exports.export("grow", ExportKind::Func, 0);
    let mut code = CodeSection::new();
    code.function(&grow_own_memory());
    let mut module = Module::new();
    module
        .section(&types)
        .section(&functions)
        .section(&one_memory())
        .section(&exports)
        .section(&code);
    module
}

/// The first memory and the exports: `ok`, and `grow-both`, which has the helper grow its
/// memory, then grows its own.
fn main_module() -> Module {
    let mut types = TypeSection::new();
    types.ty().function([], [ValType::I32]);
    let mut imports = ImportSection::new();
    imports.import("helper", "grow", EntityType::Function(0));
    let mut functions = FunctionSection::new();
    functions.function(0); // 1: ok
    functions.function(0); // 2: grow-both
    let mut exports = ExportSection::new();
    exports.export("memory", ExportKind::Memory, 0);
    exports.export("ok", ExportKind::Func, 1);
    exports.export("grow-both", ExportKind::Func, 2);
    let mut code = CodeSection::new();
    // `ok` returns where its string's (pointer, length) pair lies, as the canonical ABI has it.
    let mut ok = Function::new([]);
    ok.instructions().i32_const(16).end();
    code.function(&ok);
    let mut grow_both = Function::new([]);
    grow_both
        .instructions()
        .call(0)
        .drop()
        .i32_const(GROWTH_PAGES)
        .memory_grow(0)
        .end();
    code.function(&grow_both);
    let mut module = Module::new();
    module
        .section(&types)
        .section(&imports)
        .section(&functions)
        .section(&one_memory())
        .section(&exports)
        .section(&code)
        .section(&ok_data());
    module
}

/// The string "ok" at 32, and its (pointer, length) pair at 16, where a function returning a
/// string answers that it lies.
fn ok_data() -> DataSection {
    let mut data = DataSection::new();
    let mut pair = 32u32.to_le_bytes().to_vec();
    pair.extend(2u32.to_le_bytes());
    data.active(0, &ConstExpr::i32_const(16), pair);
    data.active(0, &ConstExpr::i32_const(32), b"ok".iter().copied());
    data
}

fn multi_memory_component() -> Vec<u8> {
    let mut instances = InstanceSection::new();
    instances.instantiate(0, Vec::<(&str, ModuleArg)>::new());
    instances.instantiate(1, [("helper", ModuleArg::Instance(0))]);
    let mut aliases = ComponentAliasSection::new();
    for (kind, name) in [
        (ExportKind::Func, "ok"),
        (ExportKind::Func, "grow-both"),
        (ExportKind::Memory, "memory"),
    ] {
        aliases.alias(Alias::CoreInstanceExport {
            instance: 1,
            kind,
            name,
        });
    }
    let mut types = ComponentTypeSection::new();
    types
        .function()
        .params(Vec::<(&str, ComponentValType)>::new())
        .result(Some(ComponentValType::Primitive(PrimitiveValType::String)));
    types
        .function()
        .params(Vec::<(&str, ComponentValType)>::new())
        .result(Some(ComponentValType::Primitive(PrimitiveValType::S32)));
    let mut lifts = CanonicalFunctionSection::new();
    lifts.lift(0, 0, [CanonicalOption::UTF8, CanonicalOption::Memory(0)]);
    lifts.lift(1, 1, []);
    let mut exports = ComponentExportSection::new();
    exports.export("ok", ComponentExportKind::Func, 0, None);
    exports.export("grow-both", ComponentExportKind::Func, 1, None);
    let mut component = Component::new();
    component
        .section(&ModuleSection(&helper_module()))
        .section(&ModuleSection(&main_module()))
        .section(&instances)
        .section(&aliases)
        .section(&types)
        .section(&lifts)
        .section(&exports);
    component.finish()
}

#[test]
fn the_multi_memory_component_is_valid() {
    let engine = moat_tests::engine();
    let wasm = multi_memory_component();
    wasmtime::component::Component::new(engine, &wasm).expect("a valid component");
}

/// A component whose `ok` returns "ok" through a tail call (`return_call`).
pub fn tail_call_component() -> Vec<u8> {
    let mut types = TypeSection::new();
    types.ty().function([], [ValType::I32]);
    let mut functions = FunctionSection::new();
    functions.function(0); // 0: the string's (pointer, length) pair
    functions.function(0); // 1: ok, a tail call of 0
    let mut exports = ExportSection::new();
    exports.export("memory", ExportKind::Memory, 0);
    exports.export("ok", ExportKind::Func, 1);
    let mut code = CodeSection::new();
    let mut pair = Function::new([]);
    pair.instructions().i32_const(16).end();
    code.function(&pair);
    let mut ok = Function::new([]);
    ok.instructions().return_call(0).end();
    code.function(&ok);
    let mut module = Module::new();
    module
        .section(&types)
        .section(&functions)
        .section(&one_memory())
        .section(&exports)
        .section(&code)
        .section(&ok_data());

    let mut instances = InstanceSection::new();
    instances.instantiate(0, Vec::<(&str, ModuleArg)>::new());
    let mut aliases = ComponentAliasSection::new();
    for (kind, name) in [(ExportKind::Func, "ok"), (ExportKind::Memory, "memory")] {
        aliases.alias(Alias::CoreInstanceExport {
            instance: 0,
            kind,
            name,
        });
    }
    let mut component_types = ComponentTypeSection::new();
    component_types
        .function()
        .params(Vec::<(&str, ComponentValType)>::new())
        .result(Some(ComponentValType::Primitive(PrimitiveValType::String)));
    let mut lifts = CanonicalFunctionSection::new();
    lifts.lift(0, 0, [CanonicalOption::UTF8, CanonicalOption::Memory(0)]);
    let mut component_exports = ComponentExportSection::new();
    component_exports.export("ok", ComponentExportKind::Func, 0, None);
    let mut component = Component::new();
    component
        .section(&ModuleSection(&module))
        .section(&instances)
        .section(&aliases)
        .section(&component_types)
        .section(&lifts)
        .section(&component_exports);
    component.finish()
}
