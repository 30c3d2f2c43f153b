//! Finding what a component offers: every exported function is a tool, with its schemas and
//! description, except those of the exported interfaces named `prompts`, `resources`,
//! `completions` and `forms` (see `wit/plugin.wit`), which become prompts, resources, completions
//! and elicitation forms.

use std::borrow::Cow;
use std::sync::Arc;

use anyhow::{Result, bail};
use rmcp::model::JsonObject;
use serde_json::Value;
use wasmtime::Engine;
use wasmtime::component::types::{ComponentFunc, ComponentItem};
use wasmtime::component::{Component, ComponentExportIndex, Type};

use super::completions::Completions;
use super::forms::{Form, Forms};
use super::prompts::Prompt;
use super::resources::Resource;
use super::{MAX_PLUGIN_SCHEMA_NODES, MAX_TOOL_SCHEMA_NODES, MAX_TOOLS, Runs, Tool};
use crate::wit::constraints::Check;
use crate::wit::docs::{FunctionDocs, PluginDocs};
use crate::wit::naming::{MAX_TOOL_NAME, ToolRules, interface_name, tool_name};
use crate::wit::output::Returns;
use crate::wit::references::References;
use crate::wit::schema::{Budget, SchemaError, object_schema};
use crate::wit::{defs, tags};

/// What a component offers, and the exported functions it offers nothing through, with the
/// reason.
#[derive(Default)]
pub(super) struct Discovered {
    pub tools: Vec<Tool>,
    pub prompts: Vec<Prompt>,
    pub resources: Vec<Resource>,
    pub completions: Completions,
    pub forms: Forms,
    pub skipped: Vec<(String, String)>,
    /// The MCP names of its functions, for its docs and errors.
    pub references: References,
}

/// One exported function.
pub(super) struct Found {
    pub interface: Option<String>,
    pub function: String,
    pub ty: ComponentFunc,
    pub index: ComponentExportIndex,
}

impl Found {
    /// Where the function is exported: `interface#function` or `function`.
    pub fn export(&self) -> String {
        match &self.interface {
            Some(interface) => format!("{interface}#{}", self.function),
            None => self.function.clone(),
        }
    }
}

/// Exports a toolchain adds to every component it builds, which are not the author's tools,
/// and why each is not one.
const TOOLCHAIN_EXPORTS: &[(&str, &str)] = &[(
    "exports#init",
    "componentize-py's own entry, which starts the interpreter when the component is built",
)];

/// Every exported function, at the top level or in an exported instance, is a tool unless
/// `rules` hide it or its interface says it is something else. Too many tools, or schemas too
/// large, refuse the whole plugin.
pub(super) fn discover(
    engine: &Engine,
    component: &Component,
    plugin: &str,
    rules: &ToolRules,
    docs: Option<&PluginDocs>,
) -> Result<Discovered> {
    let mut found = Vec::new();
    for (export, item) in component.component_type().exports(engine) {
        match item.ty {
            ComponentItem::ComponentFunc(ty) => {
                if let Some(index) = component.get_export_index(None, export) {
                    found.push(Found {
                        interface: None,
                        function: export.to_string(),
                        ty,
                        index,
                    });
                }
            }
            ComponentItem::ComponentInstance(instance) => {
                let Some(instance_index) = component.get_export_index(None, export) else {
                    continue;
                };
                for (function, item) in instance.exports(engine) {
                    let ComponentItem::ComponentFunc(ty) = item.ty else {
                        continue;
                    };
                    if let Some(index) = component.get_export_index(Some(&instance_index), function)
                    {
                        found.push(Found {
                            interface: Some(export.to_string()),
                            function: function.to_string(),
                            ty,
                            index,
                        });
                    }
                }
            }
            _ => {}
        }
    }

    let mut discovered = Discovered::default();
    let (internal, found): (Vec<Found>, Vec<Found>) = found.into_iter().partition(|f| {
        TOOLCHAIN_EXPORTS
            .iter()
            .any(|(export, _)| f.export() == *export)
    });
    for f in internal {
        let export = f.export();
        let why = TOOLCHAIN_EXPORTS.iter().find(|(e, _)| *e == export);
        let why = why.map_or("", |(_, why)| why).to_string();
        discovered.skipped.push((export, why));
    }
    let (others, found): (Vec<Found>, Vec<Found>) = found.into_iter().partition(|f| {
        f.interface
            .as_deref()
            .is_some_and(|i| OFFERS.contains(&interface_name(i)))
    });
    for other in others {
        let function_docs =
            docs.and_then(|d| d.function(other.interface.as_deref(), &other.function));
        let kind = interface_name(other.interface.as_deref().unwrap_or_default());
        let offered = match kind {
            "prompts" => {
                Prompt::describe(plugin, &other, function_docs).map(|p| discovered.prompts.push(p))
            }
            "resources" => Resource::describe(plugin, &other, function_docs)
                .map(|r| discovered.resources.push(r)),
            "forms" => Form::describe(&other, function_docs).map(|form| {
                discovered.forms.insert(other.function.clone(), form);
            }),
            _ => discovered.completions.describe(&other),
        };
        if let Err(why) = offered {
            discovered.skipped.push((other.export(), why));
        }
    }
    if discovered.prompts.len() + discovered.resources.len() > MAX_TOOLS {
        bail!(
            "plugin \"{plugin}\" exports more than the {MAX_TOOLS} prompts and resources a \
             plugin may have"
        );
    }
    discovered.prompts.sort_by(|a, b| a.name.cmp(&b.name));
    discovered.resources.sort_by(|a, b| a.name.cmp(&b.name));

    if found.len() > MAX_TOOLS {
        bail!(
            "plugin \"{plugin}\" exports {} functions, more than the {MAX_TOOLS} tools a plugin \
             may have",
            found.len()
        );
    }
    let defaults: Vec<String> = found
        .iter()
        .map(|f| {
            let qualify = found
                .iter()
                .filter(|other| other.function == f.function)
                .count()
                > 1;
            tool_name(
                plugin,
                f.interface.as_deref().filter(|_| qualify),
                &f.function,
            )
        })
        .collect();
    let names = crate::wit::naming::apply(plugin, rules, &defaults)?;
    discovered.references = References::new(
        found
            .iter()
            .zip(&names)
            .map(|(f, name)| (f.function.as_str(), name.as_deref())),
    );

    let Discovered {
        tools,
        skipped,
        references,
        ..
    } = &mut discovered;
    let mut plugin_nodes_left = MAX_PLUGIN_SCHEMA_NODES;
    for (f, name) in found.iter().zip(names) {
        let export = f.export();
        let Some(name) = name else {
            skipped.push((export, "moat.toml hides it".to_string()));
            continue;
        };
        if name.len() > MAX_TOOL_NAME {
            skipped.push((
                export,
                format!("its tool name `{name}` is longer than {MAX_TOOL_NAME} characters"),
            ));
            continue;
        }
        let function_docs = docs.and_then(|d| d.function(f.interface.as_deref(), &f.function));
        // A tool gets its own allowance, or what the plugin has left if that is less.
        let per_tool = MAX_TOOL_SCHEMA_NODES <= plugin_nodes_left;
        let mut budget = Budget::new(MAX_TOOL_SCHEMA_NODES.min(plugin_nodes_left));
        let described = describe_tool(
            name.clone(),
            export.clone(),
            plugin,
            &f.ty,
            f.index,
            function_docs,
            &mut budget,
        );
        plugin_nodes_left -= MAX_TOOL_SCHEMA_NODES.min(plugin_nodes_left) - budget.left();
        match described {
            Ok(tool) => tools.push(tool.with_references(references)),
            Err(NotATool::Tags(why)) => skipped.push((export, why)),
            Err(NotATool::Schema(SchemaError::Unsupported(unsupported))) => {
                skipped.push((export, unsupported.to_string()))
            }
            Err(NotATool::Schema(SchemaError::Invalid(why))) => skipped.push((export, why)),
            Err(NotATool::Schema(SchemaError::TooLarge)) if per_tool => bail!(
                "plugin \"{plugin}\": the JSON Schemas of tool `{name}` ({export}) would have \
                 more than {MAX_TOOL_SCHEMA_NODES} nodes, the most one tool may have"
            ),
            Err(NotATool::Schema(SchemaError::TooLarge)) => bail!(
                "plugin \"{plugin}\": with tool `{name}` ({export}), the JSON Schemas of its \
                 tools would have more than {MAX_PLUGIN_SCHEMA_NODES} nodes, the most one plugin \
                 may have"
            ),
        }
    }
    tools.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(discovered)
}

/// Why an exported function is not offered as a tool.
enum NotATool {
    Schema(SchemaError),
    /// Its doc tags are wrong.
    Tags(String),
}

impl From<SchemaError> for NotATool {
    fn from(error: SchemaError) -> Self {
        NotATool::Schema(error)
    }
}

/// The exported interfaces whose functions are not tools.
const OFFERS: [&str; 4] = ["prompts", "resources", "completions", "forms"];

fn describe_tool(
    name: String,
    export: String,
    plugin: &str,
    ty: &ComponentFunc,
    index: ComponentExportIndex,
    docs: Option<FunctionDocs<'_>>,
    budget: &mut Budget,
) -> Result<Tool, NotATool> {
    let params: Vec<(String, Type)> = ty.params().map(|(n, t)| (n.to_string(), t)).collect();
    if let Some(docs) = docs
        && let Some(unknown) = docs.constrained_params().find(|p| !docs.has_param(p))
    {
        return Err(NotATool::Tags(format!(
            "@schema names \"{unknown}\", which is no parameter"
        )));
    }
    let results: Vec<Type> = ty.results().collect();
    let returns = Returns::of(results.first().cloned());
    let input = object_schema(
        params.iter().map(|(n, t)| (n.as_str(), t.clone())),
        |param| docs.map(|d| d.param(param)).unwrap_or_default(),
        budget,
    )?;
    let narrowed = budget.narrowed();
    let output = returns.output_schema(docs.and_then(|d| d.result()), budget)?;
    let mut input = into_object(defs::factor(input));
    let check = narrowed
        .then(|| Check::new(&input).map(Arc::new))
        .transpose()
        .map_err(NotATool::Tags)?;
    let tagged = tags::mirror_headers(&mut input, docs).and_then(|()| tags::annotations(docs));
    let (title, annotations) = tagged.map_err(NotATool::Tags)?;
    let task_required = tags::task_required(docs).map_err(NotATool::Tags)?;
    let documented = docs.and_then(|d| d.description());
    let description = documented
        .clone()
        .unwrap_or_else(|| format!("Calls `{export}` of the plugin \"{plugin}\"."));
    Ok(Tool {
        name,
        export,
        description,
        documented: documented.is_some(),
        title,
        annotations,
        task_required,
        input_schema: Arc::new(input),
        output_schema: output.map(|o| Arc::new(into_object(defs::factor(o)))),
        runs: Runs::Function {
            check,
            params,
            returns,
            index,
        },
    })
}

impl Tool {
    /// The tool with its description, and the descriptions in its input schema, naming functions
    /// and parameters as the model knows them.
    fn with_references(mut self, references: &References) -> Self {
        let names = self.argument_names();
        let params: Vec<&str> = names.iter().map(String::as_str).collect();
        // A description moat made up names the export as it is.
        if self.documented {
            self.description = references.rewrite(&self.description, &params).into_owned();
        }
        let mut input = (*self.input_schema).clone();
        rewrite_descriptions(&mut input, references, &params);
        self.input_schema = Arc::new(input);
        self
    }

    /// The WIT names of its parameters and of every record field in them: what its docs and
    /// errors may name.
    pub(super) fn argument_names(&self) -> Vec<String> {
        fn fields(ty: &Type, names: &mut Vec<String>, depth: usize) {
            // Deep enough for any real argument; a type nested further is named by its top.
            if depth > 8 {
                return;
            }
            match ty {
                Type::Record(record) => {
                    for field in record.fields() {
                        if !names.iter().any(|n| n == field.name) {
                            names.push(field.name.to_string());
                        }
                        fields(&field.ty, names, depth + 1);
                    }
                }
                Type::List(list) => fields(&list.ty(), names, depth + 1),
                Type::Option(option) => fields(&option.ty(), names, depth + 1),
                _ => {}
            }
        }
        // A served tool's names are its server's own, never WIT's: nothing to rename.
        let Runs::Function { params, .. } = &self.runs else {
            return Vec::new();
        };
        let mut names: Vec<String> = params.iter().map(|(p, _)| p.clone()).collect();
        for (_, ty) in params {
            fields(ty, &mut names, 0);
        }
        names
    }
}

/// Rewrites every `description` in a schema (see [`References`]).
fn rewrite_descriptions(schema: &mut JsonObject, references: &References, params: &[&str]) {
    for (key, value) in schema.iter_mut() {
        match value {
            Value::String(text) if key == "description" => {
                if let Cow::Owned(new) = references.rewrite(text, params) {
                    *text = new;
                }
            }
            Value::Object(object) => rewrite_descriptions(object, references, params),
            Value::Array(items) => {
                for item in items.iter_mut().filter_map(Value::as_object_mut) {
                    rewrite_descriptions(item, references, params);
                }
            }
            _ => {}
        }
    }
}

fn into_object(value: Value) -> JsonObject {
    match value {
        Value::Object(object) => object,
        _ => unreachable!("object schemas are objects"),
    }
}
