//! Doc comments for a plugin's tools, read from the WIT package its build embedded.
//!
//! A component's own type has no names of types and no comments, so plugins built with the guest
//! SDK carry their encoded WIT package in a `moat:wit` custom section. Tools of a component without
//! one (or with one moat cannot read) still work: they get generated descriptions instead.
//!
//! WIT has no doc comments on parameters; a line of the function's comment that starts with a
//! parameter's name and a colon (`limit: at most this many`, optionally as a `-` list item or
//! with the name in backticks), and the lines that continue it, describe that parameter.
//!
//! Every comment is handed on as prose, its wrapped lines joined ([`prose::reflow`]).

use anyhow::{Context, Result, bail};
use wit_parser::decoding::{DecodedWasm, decode};

use crate::wit::prose;
use wit_parser::{
    Function, InterfaceId, PackageId, Resolve, Type, TypeDef, TypeDefKind, WorldItem, WorldKey,
};

/// Decodes a WIT package that a plugin carries. wit-parser's decoder asserts on some malformed
/// packages instead of returning an error (found by the `metadata` fuzz target); the bytes are
/// the plugin's, so such a panic is the plugin's malformed section, not a failure of moat's.
pub fn decode_untrusted(section: &[u8]) -> Result<DecodedWasm> {
    // wit-parser reads the package as a stream and sets aside as many bytes as a section's
    // header claims before reading them: a 600-byte section claiming 3.5 GiB took 3.5 GiB (also
    // found by the fuzz target). Parsed first as the whole slice it is, a size past the end is
    // an error before anything is allocated.
    for payload in wasmparser::Parser::new(0).parse_all(section) {
        payload.context("the WIT package is malformed")?;
    }
    std::panic::catch_unwind(|| decode(section))
        .unwrap_or_else(|_| bail!("the WIT package is malformed (its decoder gave up on it)"))
}

/// The name of the custom section the guest SDK writes.
pub const WIT_SECTION: &str = "moat:wit";

/// The documented WIT package of one plugin.
pub struct PluginDocs {
    resolve: Resolve,
    package: PackageId,
}

impl PluginDocs {
    /// Reads the `moat:wit` section of a component, wherever it sits (the SDK's build puts it in
    /// the core module inside the component). `Ok(None)`: the component carries none.
    pub fn from_component(wasm: &[u8]) -> Result<Option<Self>> {
        let Some(section) = find_custom_section(wasm, WIT_SECTION)? else {
            return Ok(None);
        };
        match decode_untrusted(section).context("decoding the embedded WIT package")? {
            DecodedWasm::WitPackage(resolve, package) => Ok(Some(Self { resolve, package })),
            DecodedWasm::Component(..) => bail!("the `{WIT_SECTION}` section holds no WIT package"),
        }
    }

    /// The package's own description: the doc comment of its first documented world, its
    /// wrapped lines joined.
    pub fn summary(&self) -> Option<String> {
        self.resolve.packages[self.package]
            .worlds
            .values()
            .find_map(|&world| self.resolve.worlds[world].docs.contents.as_deref())
            .map(prose::reflow)
    }

    /// The docs of an exported function: `interface` is the export name of the instance that holds
    /// it (`moat:text/tools@0.1.0` or a plain name), `None` for a function the world exports itself.
    pub fn function(&self, interface: Option<&str>, name: &str) -> Option<FunctionDocs<'_>> {
        let function = match interface {
            Some(export) => {
                let id = self.interface(export)?;
                self.resolve.interfaces[id].functions.get(name)?
            }
            None => self
                .world_exports()
                .find_map(|(key, item)| match (key, item) {
                    (WorldKey::Name(n), WorldItem::Function(f)) if n == name => Some(f),
                    _ => None,
                })?,
        };
        Some(FunctionDocs {
            resolve: &self.resolve,
            function,
        })
    }

    fn world_exports(&self) -> impl Iterator<Item = (&WorldKey, &WorldItem)> {
        self.resolve.packages[self.package]
            .worlds
            .values()
            .flat_map(|&world| self.resolve.worlds[world].exports.iter())
    }

    /// Whether the docs hold the interface a component exports as `export`.
    pub fn has_interface(&self, export: &str) -> bool {
        self.interface(export).is_some()
    }

    fn interface(&self, export: &str) -> Option<InterfaceId> {
        // `ns:pkg/name@version` names a package interface; a plain name, an inline world export.
        let Some((_, path)) = export.split_once('/') else {
            return self
                .world_exports()
                .find_map(|(key, item)| match (key, item) {
                    (WorldKey::Name(n), WorldItem::Interface { id, .. }) if n == export => {
                        Some(*id)
                    }
                    _ => None,
                });
        };
        let name = path.split('@').next()?;
        self.resolve.packages[self.package]
            .interfaces
            .get(name)
            .copied()
            .or_else(|| {
                let package = export.split('/').next()?;
                self.resolve.interfaces.iter().find_map(|(id, iface)| {
                    let owner = &self.resolve.packages[iface.package?].name;
                    let matches = iface.name.as_deref() == Some(name)
                        && format!("{}:{}", owner.namespace, owner.name) == package;
                    matches.then_some(id)
                })
            })
    }
}

/// The docs of one exported function.
#[derive(Clone, Copy)]
pub struct FunctionDocs<'a> {
    resolve: &'a Resolve,
    function: &'a Function,
}

impl<'a> FunctionDocs<'a> {
    /// The doc comment without the lines that describe parameters or are tags, its wrapped lines
    /// joined (see [`prose::reflow`]).
    pub fn description(&self) -> Option<String> {
        let text = prose::reflow(&self.read_apart()?.prose.join("\n"));
        (!text.is_empty()).then_some(text)
    }

    /// What the docs say of parameter `name`: its description line (with the lines that
    /// continue it), its `@schema name {…}` tag, and its WIT type.
    pub fn param(&self, name: &str) -> FieldDocs<'a> {
        let description = self.read_apart().and_then(|comment| {
            let (_, lines) = comment
                .params
                .into_iter()
                .find(|(param, _)| *param == name)?;
            Some(prose::reflow(&lines.join("\n")))
        });
        let constraints = self.tags("schema").find_map(|value| {
            let (param, keywords) = value.split_once(char::is_whitespace)?;
            (param.trim_matches('`') == name).then(|| keywords.trim())
        });
        let ty = self
            .function
            .params
            .iter()
            .find(|p| p.name == name)
            .map(|p| TypeDocs::new(self.resolve, p.ty));
        FieldDocs {
            description,
            constraints,
            ty,
        }
    }

    /// The comment read apart into its prose and the lines of each parameter: a parameter's
    /// line and the lines that continue it, as a paragraph's would. A tag or parameter line
    /// leaves a blank line in the prose, so that the sentences around it are not joined.
    fn read_apart(&self) -> Option<Comment<'a>> {
        let docs = self.function.docs.contents.as_deref()?;
        let mut comment = Comment::default();
        let mut in_param = false;
        for line in docs.lines() {
            if tag_line(line).is_some() {
                in_param = false;
                comment.prose.push("");
            } else if let Some((name, text)) = self.parameter_line(line) {
                comment.params.push((name, vec![text]));
                in_param = true;
                comment.prose.push("");
            } else if in_param && prose::continues_paragraph(line) {
                if let Some((_, lines)) = comment.params.last_mut() {
                    lines.push(line.trim());
                }
            } else {
                in_param = false;
                comment.prose.push(line);
            }
        }
        Some(comment)
    }

    /// Every `@schema` tag's parameter name, to check that each names a parameter.
    pub fn constrained_params(&self) -> impl Iterator<Item = &'a str> + 'a {
        self.tags("schema")
            .map(|value| value.split_whitespace().next().unwrap_or(value))
            .map(|param| param.trim_matches('`'))
    }

    /// Whether the function has a parameter `name`.
    pub fn has_param(&self, name: &str) -> bool {
        self.function.params.iter().any(|p| p.name == name)
    }

    /// The value of the doc tag `@name value` (such as `@mime text/plain`), if the comment has one.
    pub fn tag(&self, name: &str) -> Option<&'a str> {
        let docs = self.function.docs.contents.as_deref()?;
        docs.lines()
            .filter_map(tag_line)
            .find_map(|(tag, value)| (tag == name).then_some(value))
    }

    /// The values of every `@name value` doc tag, in order.
    pub fn tags(&self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        let docs = self.function.docs.contents.as_deref().unwrap_or_default();
        docs.lines()
            .filter_map(tag_line)
            .filter_map(move |(tag, value)| (tag == name).then_some(value))
    }

    /// The WIT type of the result.
    pub fn result(&self) -> Option<TypeDocs<'a>> {
        self.function
            .result
            .map(|ty| TypeDocs::new(self.resolve, ty))
    }

    /// `Some((param, text))` when `line` describes one of the function's parameters.
    fn parameter_line(&self, line: &'a str) -> Option<(&'a str, &'a str)> {
        let line = line.trim_start();
        let line = line
            .strip_prefix("- ")
            .or_else(|| line.strip_prefix("* "))
            .unwrap_or(line);
        let (name, text) = line.split_once(':')?;
        let name = name.trim().trim_matches('`');
        let is_param = self.function.params.iter().any(|p| p.name == name);
        (is_param && !text.trim().is_empty()).then(|| (name, text.trim()))
    }
}

/// A function's comment, read apart.
#[derive(Default)]
struct Comment<'a> {
    /// The lines that describe the function.
    prose: Vec<&'a str>,
    /// Each parameter's name and lines, in order.
    params: Vec<(&'a str, Vec<&'a str>)>,
}

/// `Some((tag, value))` when `line` is a doc tag: `@tag value`.
fn tag_line(line: &str) -> Option<(&str, &str)> {
    let tagged = line.trim().strip_prefix('@')?;
    let (tag, value) = tagged
        .split_once(char::is_whitespace)
        .unwrap_or((tagged, ""));
    let is_word = !tag.is_empty() && tag.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
    is_word.then(|| (tag, value.trim()))
}

/// What the docs say of one record field or parameter.
#[derive(Clone, Default)]
pub struct FieldDocs<'a> {
    /// Its comment, without tag lines, its wrapped lines joined.
    pub description: Option<String>,
    /// The JSON object of its `@schema` tag: JSON Schema keywords that narrow its type (see
    /// [`crate::wit::constraints`]).
    pub constraints: Option<&'a str>,
    /// Its WIT type.
    pub ty: Option<TypeDocs<'a>>,
}

impl<'a> FieldDocs<'a> {
    /// A field's comment, read apart into its description and its `@schema {…}` line.
    fn of_comment(comment: Option<&'a str>, ty: Option<TypeDocs<'a>>) -> Self {
        let comment = comment.unwrap_or_default();
        let kept: Vec<&str> = comment.lines().filter(|l| tag_line(l).is_none()).collect();
        let description = prose::reflow(&kept.join("\n"));
        let constraints = comment
            .lines()
            .filter_map(tag_line)
            .find_map(|(tag, value)| (tag == "schema").then_some(value));
        Self {
            description: (!description.is_empty()).then_some(description),
            constraints,
            ty,
        }
    }
}

/// A WIT type, walked alongside wasmtime's structural type to find the comments of fields and
/// cases. Every accessor answers `None` when the shapes part ways, so docs never block a tool.
#[derive(Clone, Copy)]
pub struct TypeDocs<'a> {
    resolve: &'a Resolve,
    ty: Type,
}

impl<'a> TypeDocs<'a> {
    fn new(resolve: &'a Resolve, ty: Type) -> Self {
        Self { resolve, ty }
    }

    fn at(&self, ty: Type) -> Self {
        Self::new(self.resolve, ty)
    }

    /// The type's definition, with aliases (`type a = b`) followed.
    fn def(&self) -> Option<&'a TypeDef> {
        let mut ty = self.ty;
        loop {
            let Type::Id(id) = ty else { return None };
            let def = &self.resolve.types[id];
            match def.kind {
                TypeDefKind::Type(inner) => ty = inner,
                _ => return Some(def),
            }
        }
    }

    /// The WIT name of the record, variant, enum or flags type this is (aliases followed).
    pub fn name(&self) -> Option<&'a str> {
        self.def()?.name.as_deref()
    }

    /// The doc comment of the named type (record, variant, enum, flags…), or of an alias on the
    /// way to it (`type user-id = u64`): the nearest comment wins, its wrapped lines joined.
    pub fn description(&self) -> Option<String> {
        let mut ty = self.ty;
        loop {
            let Type::Id(id) = ty else { return None };
            let def = &self.resolve.types[id];
            if let Some(docs) = def.docs.contents.as_deref() {
                return Some(prose::reflow(docs));
            }
            match def.kind {
                TypeDefKind::Type(inner) => ty = inner,
                _ => return None,
            }
        }
    }

    /// What a record field's comment says, and its type.
    pub fn field(&self, name: &str) -> FieldDocs<'a> {
        match self.def().map(|d| &d.kind) {
            Some(TypeDefKind::Record(record)) => record
                .fields
                .iter()
                .find(|f| f.name == name)
                .map_or_else(FieldDocs::default, |f| {
                    FieldDocs::of_comment(f.docs.contents.as_deref(), Some(self.at(f.ty)))
                }),
            _ => FieldDocs::default(),
        }
    }

    /// A variant case's comment and payload type, or an enum case's comment, its wrapped lines
    /// joined.
    pub fn case(&self, name: &str) -> (Option<String>, Option<Self>) {
        let (comment, payload) = self.case_comment(name);
        (comment.map(prose::reflow), payload)
    }

    fn case_comment(&self, name: &str) -> (Option<&'a str>, Option<Self>) {
        match self.def().map(|d| &d.kind) {
            Some(TypeDefKind::Variant(variant)) => variant
                .cases
                .iter()
                .find(|c| c.name == name)
                .map_or((None, None), |c| {
                    (c.docs.contents.as_deref(), c.ty.map(|t| self.at(t)))
                }),
            Some(TypeDefKind::Enum(enum_)) => (
                enum_
                    .cases
                    .iter()
                    .find(|c| c.name == name)
                    .and_then(|c| c.docs.contents.as_deref()),
                None,
            ),
            _ => (None, None),
        }
    }

    /// The element type of a list, fixed-length list or option.
    pub fn element(&self) -> Option<Self> {
        match &self.def()?.kind {
            TypeDefKind::List(t) | TypeDefKind::Option(t) => Some(self.at(*t)),
            TypeDefKind::FixedLengthList(t, _) => Some(self.at(*t)),
            _ => None,
        }
    }

    /// The key and value types of a map.
    pub fn map_value(&self) -> Option<Self> {
        match &self.def()?.kind {
            TypeDefKind::Map(_, v) => Some(self.at(*v)),
            _ => None,
        }
    }

    /// Item `index` of a tuple.
    pub fn tuple_item(&self, index: usize) -> Option<Self> {
        match &self.def()?.kind {
            TypeDefKind::Tuple(tuple) => tuple.types.get(index).map(|t| self.at(*t)),
            _ => None,
        }
    }

    /// The `ok` and `err` types of a result.
    pub fn result_arms(&self) -> (Option<Self>, Option<Self>) {
        match &self.def().map(|d| &d.kind) {
            Some(TypeDefKind::Result(r)) => (r.ok.map(|t| self.at(t)), r.err.map(|t| self.at(t))),
            _ => (None, None),
        }
    }
}

/// Finds a custom section by name in a component or any module nested in it.
pub(crate) fn find_custom_section<'a>(wasm: &'a [u8], name: &str) -> Result<Option<&'a [u8]>> {
    for payload in wasmparser::Parser::new(0).parse_all(wasm) {
        let payload = payload.context("the file is not a valid WebAssembly component")?;
        if let wasmparser::Payload::CustomSection(section) = payload
            && section.name() == name
        {
            return Ok(Some(section.data()));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The docs of a package written as WIT source.
    fn docs(source: &str) -> PluginDocs {
        let mut resolve = Resolve::default();
        let package = resolve.push_str("test.wit", source).expect("valid WIT");
        PluginDocs { resolve, package }
    }

    const WRAPPED: &str = r#"
package test:wrapped@0.1.0;

/// Notes, kept in a folder
/// the operator grants.
world notes {
    export tools;
}

interface tools {
    /// A note's
    /// kind.
    enum kind {
        /// Plain text, as
        /// written.
        plain,
    }

    /// One note.
    record note {
        /// The note's title, at most
        /// 80 characters.
        title: string,
    }

    /// Finds notes by words. Use it
    /// when you do not know a note's name.
    ///
    /// - the search ignores case;
    /// - the order is the
    ///   folder's.
    ///
    /// query: the words to look for, all of
    ///   which a note must hold.
    /// limit: at most this many.
    /// @read-only
    find: func(query: string, limit: u32, kind: kind) -> list<note>;
}
"#;

    #[test]
    fn wrapped_comments_become_paragraphs_everywhere_they_are_read() {
        let docs = docs(WRAPPED);
        assert_eq!(
            docs.summary().as_deref(),
            Some("Notes, kept in a folder the operator grants.")
        );
        let find = docs
            .function(Some("test:wrapped/tools@0.1.0"), "find")
            .unwrap();
        assert_eq!(
            find.description().as_deref(),
            Some(
                "Finds notes by words. Use it when you do not know a note's name.\n\n\
                 - the search ignores case;\n- the order is the folder's."
            )
        );
        // A parameter's wrapped line is the parameter's, not the tool's.
        assert_eq!(
            find.param("query").description.as_deref(),
            Some("the words to look for, all of which a note must hold.")
        );
        assert_eq!(
            find.param("limit").description.as_deref(),
            Some("at most this many.")
        );
        let kind = find.param("kind").ty.unwrap();
        assert_eq!(kind.description().as_deref(), Some("A note's kind."));
        assert_eq!(
            kind.case("plain").0.as_deref(),
            Some("Plain text, as written.")
        );
        let note = find.result().unwrap().element().unwrap();
        assert_eq!(
            note.field("title").description.as_deref(),
            Some("The note's title, at most 80 characters.")
        );
    }

    #[test]
    fn a_tag_or_parameter_line_between_sentences_keeps_them_apart() {
        let docs = docs(
            "package test:apart;\n\
             interface tools {\n\
             /// Reads a note.\n\
             /// limit: at most this many.\n\
             /// @title Read\n\
             /// Fails when it is missing.\n\
             read: func(limit: u32);\n\
             }\n\
             world w { export tools; }\n",
        );
        let read = docs.function(Some("test:apart/tools"), "read").unwrap();
        assert_eq!(
            read.description().as_deref(),
            Some("Reads a note.\n\nFails when it is missing.")
        );
        assert_eq!(
            read.param("limit").description.as_deref(),
            Some("at most this many.")
        );
    }
}
