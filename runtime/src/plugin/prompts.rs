//! A plugin's prompts: the functions of its exported `prompts` interface. A prompt's parameters
//! are its arguments (named in camelCase, as MCP names things) and it returns `list<message>`,
//! or a `result` of one whose `err` the client gets as an error.

use rmcp::model::{JsonObject, PromptMessage};
use serde_json::Value;
use wasmtime::component::{ComponentExportIndex, Type};

use super::discover::Found;
use super::{CallError, Exchange, Export, Plugin};
use crate::sandbox::network::Denials;
use crate::wit::docs::FunctionDocs;
use crate::wit::naming::{camel_case, tool_name};
use crate::wit::output::{is_prompt_message, prompt_messages};
use crate::wit::values::{ArgError, args_from_json};

/// One prompt.
pub struct Prompt {
    /// Its MCP name, `{plugin}_{function}` as for tools.
    pub name: String,
    /// The function's WIT name, as the plugin's completions know it.
    pub function: String,
    pub description: Option<String>,
    pub arguments: Vec<Argument>,
    runs: Runs,
}

/// What getting a prompt runs.
enum Runs {
    /// A function of the `prompts` interface.
    Function {
        params: Vec<(String, Type)>,
        index: ComponentExportIndex,
        /// Whether it returns a `result`.
        fallible: bool,
    },
    /// A `prompts/get` of the MCP server the plugin is (see [`super::served`]).
    Served,
}

/// One argument of a prompt.
pub struct Argument {
    /// Its MCP name: the parameter's, in camelCase.
    pub name: String,
    /// The WIT parameter it fills.
    pub param: String,
    pub description: Option<String>,
    pub required: bool,
}

/// What a prompt gave.
pub enum Got {
    Messages(Vec<PromptMessage>),
    /// Its `err`: what the client is told instead.
    Refused(String),
}

impl Prompt {
    pub(super) fn describe(
        plugin: &str,
        found: &Found,
        docs: Option<FunctionDocs<'_>>,
    ) -> Result<Self, String> {
        let fallible = match found.ty.results().next() {
            Some(Type::List(list)) if is_prompt_message(&list.ty()) => false,
            Some(Type::Result(result)) if matches!(result.ok(), Some(Type::List(list)) if is_prompt_message(&list.ty())) => {
                true
            }
            _ => {
                return Err(
                    "a prompt must return list<message> (or a result of one) from moat:plugin/prompt"
                        .into(),
                );
            }
        };
        let params: Vec<(String, Type)> = found
            .ty
            .params()
            .map(|(name, ty)| (name.to_string(), ty))
            .collect();
        let arguments = params
            .iter()
            .map(|(param, ty)| Argument {
                name: camel_case(param),
                param: param.clone(),
                description: docs.and_then(|d| d.param(param).description),
                required: !matches!(ty, Type::Option(_)),
            })
            .collect();
        Ok(Self {
            name: tool_name(plugin, None, &found.function),
            function: found.function.clone(),
            description: docs.and_then(|d| d.description()),
            arguments,
            runs: Runs::Function {
                params,
                index: found.index,
                fallible,
            },
        })
    }

    /// A prompt of an MCP server plugin, as its `prompts/list` declares it.
    pub(super) fn served(plugin: &str, listed: rmcp::model::Prompt) -> Self {
        let arguments = listed
            .arguments
            .unwrap_or_default()
            .into_iter()
            .map(|argument| Argument {
                param: argument.name.clone(),
                name: argument.name,
                description: argument.description,
                required: argument.required.unwrap_or(false),
            })
            .collect();
        Self {
            name: tool_name(plugin, None, &listed.name),
            function: listed.name,
            description: listed.description,
            arguments,
            runs: Runs::Served,
        }
    }

    /// Checks a served prompt's `arguments` as MCP types them: a string for each argument the
    /// prompt declares, none required missing, none it does not declare.
    pub(super) fn check_served(&self, arguments: &JsonObject) -> Result<(), ArgError> {
        let refuse = |path: &str, message: String| ArgError {
            path: path.to_string(),
            message,
        };
        for (name, value) in arguments {
            if !self.arguments.iter().any(|a| &a.name == name) {
                return Err(refuse(
                    "arguments",
                    format!("the prompt has no argument \"{name}\""),
                ));
            }
            if !value.is_string() {
                return Err(refuse(name, "a prompt's arguments are strings".into()));
            }
        }
        match self
            .arguments
            .iter()
            .find(|a| a.required && !arguments.contains_key(&a.name))
        {
            Some(missing) => Err(refuse(
                "arguments",
                format!("\"{}\" is a required argument", missing.name),
            )),
            None => Ok(()),
        }
    }
}

impl Plugin {
    /// Runs `prompt` with the client's `arguments` (strings, by argument name) in a fresh
    /// instance.
    pub async fn get_prompt(
        &self,
        prompt: &Prompt,
        arguments: Option<&JsonObject>,
        exchange: Exchange,
    ) -> Result<Got, CallError> {
        let Runs::Function {
            params,
            index,
            fallible,
        } = &prompt.runs
        else {
            return self.get_served_prompt(prompt, arguments, exchange).await;
        };
        let args = typed_arguments(
            prompt
                .arguments
                .iter()
                .zip(params)
                .map(|(argument, (_, ty))| (argument.name.as_str(), ty)),
            arguments,
        );
        let params = args_from_json(params, Some(&args)).map_err(CallError::InvalidArguments)?;
        let export = Export {
            name: &prompt.name,
            index: *index,
        };
        let results = self
            .invoke(export, &params, exchange, &mut Denials::default())
            .await?;
        let value = results.first();
        let messages = match (*fallible, value) {
            (false, Some(value)) => value,
            (true, Some(wasmtime::component::Val::Result(Ok(Some(value))))) => &**value,
            (true, Some(wasmtime::component::Val::Result(Err(error)))) => {
                let why = match error.as_deref() {
                    Some(wasmtime::component::Val::String(why)) => why.clone(),
                    _ => "the prompt refused these arguments".to_string(),
                };
                return Ok(Got::Refused(why));
            }
            _ => return Err(CallError::BadResult("the prompt returned nothing".into())),
        };
        prompt_messages(messages)
            .map(Got::Messages)
            .map_err(CallError::BadResult)
    }
}

/// The JSON arguments for WIT parameters from MCP's string arguments: a string parameter takes
/// the text as it is, any other parses it as JSON (a number, `true`, an enum case's name…),
/// falling back to the text, so that the parameter's own check has the last word.
pub(super) fn typed_arguments<'a>(
    params: impl Iterator<Item = (&'a str, &'a Type)>,
    given: Option<&JsonObject>,
) -> JsonObject {
    let mut args = JsonObject::new();
    for (name, ty) in params {
        let Some(value) = given.and_then(|given| given.get(name)) else {
            continue;
        };
        let text_param =
            matches!(ty, Type::String) || matches!(ty, Type::Option(o) if o.ty() == Type::String);
        let value = match value {
            Value::String(text) if !text_param => {
                serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.clone()))
            }
            other => other.clone(),
        };
        args.insert(name.to_string(), value);
    }
    args
}
