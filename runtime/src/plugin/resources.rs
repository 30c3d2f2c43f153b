//! A plugin's resources: the functions of its exported `resources` interface. One without
//! parameters is a resource; one with parameters a resource template whose variables are its
//! parameters (in camelCase). Its `@uri` doc tag gives the URI (default: the function's name, then
//! `/{variable}` for each parameter), always under the plugin's own scheme, so no plugin can
//! serve another's URIs; `@mime` gives the MIME type.

use rmcp::model::ResourceContents;
use wasmtime::component::{ComponentExportIndex, Type, Val};

use super::discover::Found;
use super::prompts::typed_arguments;
use super::{CallError, Exchange, Export, Plugin};
use crate::sandbox::network::Denials;
use crate::wit::docs::FunctionDocs;
use crate::wit::naming::{camel_case, tool_name};
use crate::wit::output::{is_body, resource_contents};
use crate::wit::uri_template::UriTemplate;
use crate::wit::values::args_from_json;

/// One resource, or one resource template.
pub struct Resource {
    /// `{plugin}_{function}`, as tools are named: what `[[access]]` rules match.
    pub name: String,
    /// The function's WIT name.
    pub function: String,
    /// The URI the plugin declares, without its scheme; what its completions are told.
    pub template: UriTemplate,
    pub description: Option<String>,
    pub mime_type: Option<String>,
    params: Vec<(String, Type)>,
    index: ComponentExportIndex,
    /// Whether it returns a `result`, whose `err` says there is no such resource.
    fallible: bool,
}

/// A resource template's variables, as a URI matched them: (name, decoded value).
pub type Variables = Vec<(String, String)>;

/// A resource found by its URI: its plugin, itself and its variables.
pub type Located<'a> = (&'a std::sync::Arc<Plugin>, &'a Resource, Variables);

/// What a read gave.
pub enum Read {
    Contents(ResourceContents),
    /// Its `err`: the plugin has no resource at this URI.
    NotFound(String),
}

impl Resource {
    pub(super) fn describe(
        plugin: &str,
        found: &Found,
        docs: Option<FunctionDocs<'_>>,
    ) -> Result<Self, String> {
        let is_contents = |ty: &Type| {
            matches!(ty, Type::String)
                || matches!(ty, Type::List(list) if list.ty() == Type::U8)
                || is_body(ty)
        };
        let fallible = match found.ty.results().next() {
            Some(ty) if is_contents(&ty) => false,
            Some(Type::Result(result)) if result.ok().is_some_and(|ok| is_contents(&ok)) => true,
            _ => {
                return Err(
                    "a resource must return string, list<u8> or body (or a result of \
                            one) from moat:plugin/content"
                        .into(),
                );
            }
        };
        let params: Vec<(String, Type)> = found
            .ty
            .params()
            .map(|(name, ty)| (name.to_string(), ty))
            .collect();
        let declared = docs.and_then(|d| d.tag("uri")).map(str::to_string);
        let uri = declared.unwrap_or_else(|| {
            let mut uri = found.function.clone();
            for (param, _) in &params {
                uri.push_str(&format!("/{{{}}}", camel_case(param)));
            }
            uri
        });
        if uri.contains("://") {
            return Err(format!(
                "its URI \"{uri}\" names a scheme; a plugin's resources are all under its own"
            ));
        }
        let template = UriTemplate::parse(&uri).map_err(|e| e.to_string())?;
        let mut variables: Vec<&str> = template.variables().collect();
        let mut wanted: Vec<String> = params.iter().map(|(p, _)| camel_case(p)).collect();
        variables.sort_unstable();
        wanted.sort_unstable();
        if variables != wanted {
            return Err(format!(
                "its URI \"{uri}\" must have one variable per parameter, named in camelCase \
                 ({})",
                wanted.join(", ")
            ));
        }
        Ok(Self {
            name: tool_name(plugin, None, &found.function),
            function: found.function.clone(),
            template,
            description: docs.and_then(|d| d.description()),
            mime_type: docs.and_then(|d| d.tag("mime")).map(str::to_string),
            params,
            index: found.index,
            fallible,
        })
    }

    /// The WIT parameter that the template variable `variable` fills.
    pub fn param_of(&self, variable: &str) -> Option<&str> {
        self.params
            .iter()
            .map(|(param, _)| param.as_str())
            .find(|param| camel_case(param) == variable)
    }

    /// Whether this is a template (it has variables) rather than one resource.
    pub fn is_template(&self) -> bool {
        !self.template.is_fixed()
    }
}

impl Plugin {
    /// The resource of this plugin at `path` (its URI without the scheme), with the template's
    /// variables; fixed resources are tried first.
    pub fn find_resource(&self, path: &str) -> Option<(&Resource, Variables)> {
        let (fixed, templates): (Vec<&Resource>, Vec<&Resource>) =
            self.resources.iter().partition(|r| !r.is_template());
        fixed
            .into_iter()
            .chain(templates)
            .find_map(|resource| Some((resource, resource.template.matches(path)?)))
    }

    /// Reads `resource` at `uri` (the full URI, as the client asked) with the variables it
    /// matched, in a fresh instance.
    pub async fn read_resource(
        &self,
        resource: &Resource,
        uri: &str,
        variables: &[(String, String)],
        exchange: Exchange,
    ) -> Result<Read, CallError> {
        let given: rmcp::model::JsonObject = variables
            .iter()
            .map(|(name, value)| (name.clone(), value.clone().into()))
            .collect();
        let names: Vec<String> = resource.params.iter().map(|(p, _)| camel_case(p)).collect();
        let args = typed_arguments(
            names
                .iter()
                .zip(&resource.params)
                .map(|(name, (_, ty))| (name.as_str(), ty)),
            Some(&given),
        );
        let params =
            args_from_json(&resource.params, Some(&args)).map_err(CallError::InvalidArguments)?;
        let export = Export {
            name: &resource.name,
            index: resource.index,
        };
        let results = self
            .invoke(export, &params, exchange, &mut Denials::default())
            .await?;
        let body = match (resource.fallible, results.first()) {
            (false, Some(body)) => body,
            (true, Some(Val::Result(Ok(Some(body))))) => &**body,
            (true, Some(Val::Result(Err(why)))) => {
                let why = match why.as_deref() {
                    Some(Val::String(why)) => why.clone(),
                    _ => "no such resource".to_string(),
                };
                return Ok(Read::NotFound(why));
            }
            _ => return Err(CallError::BadResult("the resource returned nothing".into())),
        };
        let mime = resource.mime_type.clone().or_else(|| default_mime(body));
        resource_contents(uri.to_string(), mime, body)
            .map(Read::Contents)
            .map_err(CallError::BadResult)
    }
}

/// The MIME type of contents whose resource declares none.
fn default_mime(body: &Val) -> Option<String> {
    let text = match body {
        Val::Variant(case, _) => case == "text",
        other => matches!(other, Val::String(_)),
    };
    Some(
        if text {
            "text/plain"
        } else {
            "application/octet-stream"
        }
        .to_string(),
    )
}
