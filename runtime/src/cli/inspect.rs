//! `moat inspect`: what a plugin offers.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use serde_json::{Value, json};

use moat::supply::policy::Policy;

use moat::supply::PluginSource;
use moat::supply::source::Fetcher;
use moat::wit::world::World;

use super::load::{configured_source, load_source, one_source};
use super::print_out;

/// What can be shown of a plugin that does not load: why, and the imports and exports its
/// component declares, so that its author sees what moat would have to offer.
async fn cannot_load(
    source: &PluginSource,
    error: anyhow::Error,
    as_json: bool,
) -> Result<ExitCode> {
    let fetched = Fetcher::from_env().fetch(&source.source).await;
    let world = fetched.and_then(|fetched| World::of(&fetched.wasm));
    let Ok(world) = world else {
        return Err(error);
    };
    if as_json {
        let report = json!({
            "plugin": source.name,
            "error": format!("{error:#}"),
            "imports": world.imports,
            "exports": world.exports,
        });
        print_out(&serde_json::to_string_pretty(&report)?);
    } else {
        let mut out = format!("plugin {}\n\ncannot load: {error:#}\n", source.name);
        for (heading, names) in [("imports", &world.imports), ("exports", &world.exports)] {
            out.push_str(&format!("\n{heading}:\n"));
            if names.is_empty() {
                out.push_str("  (none)\n");
            }
            for name in names {
                out.push_str(&format!("  {name}\n"));
            }
        }
        print_out(out.trim_end());
    }
    Ok(ExitCode::FAILURE)
}

pub async fn inspect(
    text: &str,
    config: Option<&Path>,
    as_json: bool,
    policy: &Policy,
) -> Result<ExitCode> {
    let source = match config {
        Some(config) => configured_source(config, text)?,
        None => one_source(text)?,
    };
    let (plugin, origin) = match load_source(source.clone(), policy).await {
        Ok(loaded) => loaded,
        Err(error) => return cannot_load(&source, error, as_json).await,
    };
    let tools: Vec<Value> = plugin
        .tools
        .iter()
        .map(|tool| {
            json!({
                "name": tool.name,
                "export": tool.export,
                "description": tool.description,
                "inputSchema": *tool.input_schema,
                "outputSchema": tool.output_schema.as_deref(),
            })
        })
        .collect();
    let prompts: Vec<Value> = plugin
        .prompts
        .iter()
        .map(|prompt| {
            let arguments: Vec<Value> = prompt
                .arguments
                .iter()
                .map(|a| json!({"name": a.name, "description": a.description, "required": a.required}))
                .collect();
            json!({"name": prompt.name, "description": prompt.description, "arguments": arguments})
        })
        .collect();
    let resources: Vec<Value> = plugin
        .resources
        .iter()
        .map(|resource| {
            let uri = plugin.uri(&resource.template);
            let key = if resource.is_template() {
                "uriTemplate"
            } else {
                "uri"
            };
            json!({
                key: uri,
                "name": resource.function,
                "description": resource.description,
                "mimeType": resource.mime_type,
            })
        })
        .collect();
    let forms: serde_json::Map<String, Value> = plugin
        .forms()
        .map(|(name, schema)| (name.to_string(), schema.clone()))
        .collect();
    let skipped: Vec<Value> = plugin
        .skipped
        .iter()
        .map(|(export, reason)| json!({"export": export, "reason": reason}))
        .collect();
    let ungranted = moat::sandbox::grants::ungranted(&plugin.imports, &plugin.grants);
    let findings = moat::plugin::lint::lint(&plugin);
    if as_json {
        let report = json!({
            "plugin": &*plugin.name,
            "digest": plugin.digest,
            "origin": origin,
            "summary": plugin.summary,
            "imports": plugin.imports,
            "ungranted": ungranted,
            "publisher": plugin.admission.publisher,
            "manifest": plugin.admission.manifest,
            "grants": plugin.admission.notes,
            "tools": tools,
            "prompts": prompts,
            "resources": resources,
            "forms": forms,
            "skipped": skipped,
            "lint": findings
                .iter()
                .map(|f| json!({"subject": f.subject, "message": f.message}))
                .collect::<Vec<_>>(),
        });
        print_out(&serde_json::to_string_pretty(&report)?);
        return Ok(ExitCode::SUCCESS);
    }
    let mut out = String::new();
    macro_rules! line {
        ($($arg:tt)*) => {{
            out.push_str(&format!($($arg)*));
            out.push('\n');
        }};
    }
    line!("plugin {}", plugin.name);
    if let Some(summary) = &plugin.summary {
        line!("  {}", summary.trim().replace('\n', "\n  "));
    }
    line!("\ndigest: {}\nfrom:   {origin}", plugin.digest);
    line!("\nimports:");
    if plugin.imports.is_empty() {
        line!("  (none)");
    }
    for import in &plugin.imports {
        line!("  {import}");
    }
    for note in &ungranted {
        line!("  note: {note}");
    }
    let admission = &plugin.admission;
    if let Some(publisher) = &admission.publisher {
        line!("signed by: {publisher}");
    }
    match &admission.manifest {
        Some(manifest) => line!(
            "\nmanifest (what it asks for):\n  {}",
            serde_json::to_string(manifest)?
        ),
        None => line!("\nmanifest: none (the operator's grants apply as written)"),
    }
    line!("\ngrants:");
    for note in &admission.notes {
        line!("  {note}");
    }
    line!("\ntools:");
    for tool in &plugin.tools {
        line!("  {}  ({})", tool.name, tool.export);
        if let Some(title) = &tool.title {
            line!("    title: {title}");
        }
        line!("    {}", tool.description.replace('\n', "\n    "));
        if let Some(annotations) = &tool.annotations {
            line!("    hints: {}", serde_json::to_string(annotations)?);
        }
        if tool.task_required {
            line!("    runs only as a task");
        }
        let input = serde_json::to_string_pretty(&*tool.input_schema)?;
        line!("    input schema: {}", input.replace('\n', "\n    "));
        if let Some(output) = &tool.output_schema {
            let output = serde_json::to_string_pretty(&**output)?;
            line!("    output schema: {}", output.replace('\n', "\n    "));
        }
    }
    for (export, reason) in &plugin.skipped {
        line!("  (not offered: {export}: {reason})");
    }
    if !plugin.prompts.is_empty() {
        line!("\nprompts:");
    }
    for prompt in &plugin.prompts {
        line!("  {}", prompt.name);
        if let Some(description) = &prompt.description {
            line!("    {}", description.replace('\n', "\n    "));
        }
        for argument in &prompt.arguments {
            let required = if argument.required {
                "required"
            } else {
                "optional"
            };
            let about = argument.description.as_deref().unwrap_or("");
            line!("    {} ({required}) {about}", argument.name);
        }
    }
    if !plugin.resources.is_empty() {
        line!("\nresources:");
    }
    for resource in &plugin.resources {
        let mime = resource.mime_type.as_deref().unwrap_or("type not declared");
        line!("  {}  ({mime})", plugin.uri(&resource.template));
        if let Some(description) = &resource.description {
            line!("    {}", description.replace('\n', "\n    "));
        }
    }
    if !forms.is_empty() {
        line!("\nforms (asked of the user):");
    }
    for (name, schema) in &forms {
        line!("  {name}: {}", serde_json::to_string(schema)?);
    }
    line!(
        "\nlint: {}",
        super::lint::render(&plugin.name, &findings).trim_end()
    );
    print_out(out.trim_end());
    Ok(ExitCode::SUCCESS)
}
