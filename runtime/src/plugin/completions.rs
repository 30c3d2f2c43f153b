//! A plugin's completions: the functions `complete-prompt` and `complete-resource` of its
//! exported `completions` interface, each `func(target: string, argument: string, value:
//! string) -> list<string>`.

use wasmtime::component::{ComponentExportIndex, Type, Val};

use super::discover::Found;
use super::{CallError, Exchange, Export, Plugin};
use crate::sandbox::network::Denials;

/// The most suggestions a completion returns (MCP's own cap).
pub const MAX_SUGGESTIONS: usize = 100;

/// Which completions a plugin has.
#[derive(Default)]
pub struct Completions {
    prompt: Option<ComponentExportIndex>,
    resource: Option<ComponentExportIndex>,
}

/// What is completed.
#[derive(Clone, Copy, Debug)]
pub enum Completing<'a> {
    /// An argument of the prompt with this WIT function name.
    Prompt(&'a str),
    /// A variable of the resource template with this URI (as the plugin declares it).
    Resource(&'a str),
}

impl Completions {
    pub(super) fn describe(&mut self, found: &Found) -> Result<(), String> {
        let slot = match found.function.as_str() {
            "complete-prompt" => &mut self.prompt,
            "complete-resource" => &mut self.resource,
            _ => return Err("`completions` has only complete-prompt and complete-resource".into()),
        };
        let params: Vec<Type> = found.ty.params().map(|(_, ty)| ty).collect();
        let returns_strings =
            matches!(found.ty.results().next(), Some(Type::List(l)) if l.ty() == Type::String);
        if params != [Type::String, Type::String, Type::String] || !returns_strings {
            return Err(format!(
                "{} must be func(target: string, argument: string, value: string) -> list<string>",
                found.function
            ));
        }
        *slot = Some(found.index);
        Ok(())
    }
}

impl Plugin {
    /// The plugin's suggestions for `argument` of `completing`, whose value so far is `value`
    /// (none when the plugin has no such completion), at most [`MAX_SUGGESTIONS`], and whether
    /// it had more.
    pub async fn complete(
        &self,
        completing: Completing<'_>,
        argument: &str,
        value: &str,
    ) -> Result<(Vec<String>, bool), CallError> {
        let (index, target, name) = match completing {
            Completing::Prompt(prompt) => (self.completions.prompt, prompt, "complete-prompt"),
            Completing::Resource(uri) => (self.completions.resource, uri, "complete-resource"),
        };
        let Some(index) = index else {
            return Ok((Vec::new(), false));
        };
        let params = [target, argument, value].map(|s| Val::String(s.to_string()));
        let export = Export { name, index };
        let results = self
            .invoke(
                export,
                &params,
                Exchange::default(),
                &mut Denials::default(),
            )
            .await?;
        let Some(Val::List(values)) = results.first() else {
            return Err(CallError::BadResult("completions must be a list".into()));
        };
        let mut suggestions: Vec<String> = values
            .iter()
            .filter_map(|v| match v {
                Val::String(s) => Some(s.clone()),
                _ => None,
            })
            .collect();
        let more = suggestions.len() > MAX_SUGGESTIONS;
        suggestions.truncate(MAX_SUGGESTIONS);
        Ok((suggestions, more))
    }
}
