//! What a component says about itself: the `moat:wit` (doc comments) and `moat:manifest`
//! (permission requests) custom sections, read by `moat::wit::docs` and `moat::supply::manifest`.
//!
//! Input: a first byte, then either a whole component or module (byte 0 mod 3 = 0), or the
//! contents of a `moat:wit` (1) or `moat:manifest` (2) section, which the target wraps in a
//! module. Checks that reading never panics (moat contains the asserts of wit-parser's decoder),
//! that every function of a decoded package has its docs found, and that a manifest read
//! survives a trip through JSON.

use moat::supply::manifest::{MANIFEST_SECTION, Manifest};
use moat::wit::docs::{PluginDocs, TypeDocs, WIT_SECTION, decode_untrusted};
use wit_parser::decoding::DecodedWasm;
use wit_parser::{Resolve, TypeDefKind};

/// Runs one input; panics on a finding.
pub fn check(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let wasm = match mode % 3 {
        0 => rest.to_vec(),
        1 => module_with(WIT_SECTION, rest),
        _ => module_with(MANIFEST_SECTION, rest),
    };
    if let Ok(Some(docs)) = PluginDocs::from_component(&wasm) {
        let _ = docs.summary();
        if mode % 3 == 1 {
            walk(&docs, rest);
        }
    }
    if let Ok(Some(manifest)) = moat::supply::manifest::read(&wasm) {
        let _ = manifest.requests();
        let json = serde_json::to_vec(&manifest).unwrap();
        let again: Manifest = serde_json::from_slice(&json).unwrap_or_else(|e| {
            panic!("{} does not read back: {e}", String::from_utf8_lossy(&json))
        });
        assert_eq!(again, manifest);
    }
}

/// Looks up the docs of every function of the package's interfaces, as tool discovery does.
fn walk(docs: &PluginDocs, section: &[u8]) {
    let Ok(DecodedWasm::WitPackage(resolve, package)) = decode_untrusted(section) else {
        return;
    };
    let names = names(&resolve);
    // Types may share parts: a bound on the visits keeps a wide DAG from looking like a hang.
    let mut budget = 10_000usize;
    for &iface in resolve.packages[package].interfaces.values() {
        let Some(export) = resolve.id_of(iface) else {
            continue;
        };
        for (name, function) in &resolve.interfaces[iface].functions {
            let found = docs
                .function(Some(&export), name)
                .unwrap_or_else(|| panic!("no docs found for {export}#{name}"));
            let _ = found.description();
            for param in &function.params {
                let param = found.param(&param.name);
                let _ = param.constraints;
                if let Some(ty) = param.ty {
                    walk_type(ty, &names, &mut budget);
                }
            }
            if let Some(ty) = found.result() {
                walk_type(ty, &names, &mut budget);
            }
        }
    }
}

/// Every field and case name in the package, to ask each type for.
fn names(resolve: &Resolve) -> Vec<String> {
    let mut names = Vec::new();
    for (_, def) in resolve.types.iter() {
        match &def.kind {
            TypeDefKind::Record(r) => names.extend(r.fields.iter().map(|f| f.name.clone())),
            TypeDefKind::Variant(v) => names.extend(v.cases.iter().map(|c| c.name.clone())),
            TypeDefKind::Enum(e) => names.extend(e.cases.iter().map(|c| c.name.clone())),
            _ => {}
        }
    }
    names.truncate(64);
    names
}

fn walk_type(ty: TypeDocs<'_>, names: &[String], budget: &mut usize) {
    if *budget == 0 {
        return;
    }
    *budget -= 1;
    let _ = ty.description();
    let mut inner: Vec<TypeDocs<'_>> = Vec::new();
    for name in names {
        inner.extend(ty.field(name).ty);
        inner.extend(ty.case(name).1);
    }
    inner.extend(ty.element());
    inner.extend(ty.map_value());
    inner.extend((0..4).filter_map(|i| ty.tuple_item(i)));
    let (ok, err) = ty.result_arms();
    inner.extend(ok.into_iter().chain(err));
    for ty in inner {
        walk_type(ty, names, budget);
    }
}

/// A core module holding one custom section.
fn module_with(name: &str, data: &[u8]) -> Vec<u8> {
    let mut payload = leb128(name.len());
    payload.extend_from_slice(name.as_bytes());
    payload.extend_from_slice(data);
    let mut wasm = b"\0asm\x01\0\0\0\0".to_vec();
    wasm.extend(leb128(payload.len()));
    wasm.extend(payload);
    wasm
}

fn leb128(mut n: usize) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            return out;
        }
        out.push(byte | 0x80);
    }
}
