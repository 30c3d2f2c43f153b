//! A plugin's elicitation forms: the functions of its exported `forms` interface, whose
//! parameters are a form's fields. A guest asks one by name (`elicit-typed`); moat writes the
//! `requestedSchema` from the WIT types, as for a tool's input, and checks an accepted answer
//! against them before the guest sees it, so a form's answer is as typed as a tool's arguments.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;
use wasmtime::component::Type;

use super::discover::Found;
use crate::sandbox::host::{Answers, AskError, Client, Declared, Detach, Question};
use crate::wit::constraints::Check;
use crate::wit::docs::FunctionDocs;
use crate::wit::schema::{Budget, integer_range, object_schema};
use crate::wit::values::args_from_json;

/// The schema nodes one form may take: forms are flat.
const MAX_FORM_NODES: usize = 1_000;

/// One form.
pub struct Form {
    /// The `requestedSchema` of its elicitation.
    pub schema: Value,
    params: Vec<(String, Type)>,
    /// The check of what `@schema` tags add to its fields, if they add anything.
    check: Option<Check>,
}

/// A plugin's forms, by function name.
pub type Forms = BTreeMap<String, Form>;

impl Form {
    pub(super) fn describe(found: &Found, docs: Option<FunctionDocs<'_>>) -> Result<Self, String> {
        if found.ty.results().next().is_some() {
            return Err("a form is a function without a result".into());
        }
        let params: Vec<(String, Type)> = found
            .ty
            .params()
            .map(|(name, ty)| (name.to_string(), ty))
            .collect();
        // MCP's forms hold primitive fields only.
        let primitive = |ty: &Type| {
            integer_range(ty).is_some()
                || matches!(
                    ty,
                    Type::Bool | Type::String | Type::Enum(_) | Type::Float32 | Type::Float64
                )
        };
        if let Some((name, _)) = params.iter().find(|(_, ty)| match ty {
            Type::Option(option) => !primitive(&option.ty()),
            ty => !primitive(ty),
        }) {
            return Err(format!(
                "form field `{name}` must be a string, number, boolean or enum (or an option of one)"
            ));
        }
        let mut budget = Budget::new(MAX_FORM_NODES);
        let mut schema = object_schema(
            params.iter().map(|(n, t)| (n.as_str(), t.clone())),
            |param| docs.map(|d| d.param(param)).unwrap_or_default(),
            &mut budget,
        )
        .map_err(|e| format!("its fields have no schema: {e:?}"))?;
        // Elicitation schemas are flat: an optional field is one that is not required, and its
        // `null` alternative (which a form cannot express) goes.
        if let Some(properties) = schema["properties"].as_object_mut() {
            for property in properties.values_mut() {
                if let Some(inner) = property["anyOf"].get(0).cloned() {
                    let outer = std::mem::replace(property, inner);
                    for keyword in ["description", "default", "examples"] {
                        if let Some(value) = outer.get(keyword) {
                            property[keyword] = value.clone();
                        }
                    }
                }
            }
        }
        let schema = crate::wit::defs::factor(schema);
        let check = match (&schema, budget.narrowed()) {
            (Value::Object(object), true) => Some(Check::new(object)?),
            _ => None,
        };
        Ok(Self {
            schema,
            params,
            check,
        })
    }
}

/// Fills in the schemas of a guest's typed forms and checks their answers, around the client
/// that really asks.
pub struct Typed {
    pub inner: Arc<dyn Client>,
    pub forms: Arc<Forms>,
}

impl Client for Typed {
    fn declared(&self) -> Declared {
        self.inner.declared()
    }

    fn detach(&self) -> Detach {
        self.inner.detach()
    }

    fn ask(
        self: Arc<Self>,
        mut questions: Vec<Question>,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<Answers, AskError>> + Send>> {
        for question in &mut questions {
            let Some(name) = &question.form else { continue };
            let Some(form) = self.forms.get(name) else {
                let why = format!("the plugin declares no form `{name}` in its `forms` export");
                return Box::pin(std::future::ready(Err(AskError::Refused(why))));
            };
            question.params["requestedSchema"] = form.schema.clone();
        }
        Box::pin(async move {
            let answers = self.inner.clone().ask(questions.clone()).await?;
            for (key, answer) in &answers {
                let form = questions
                    .iter()
                    .find(|q| q.key == *key)
                    .and_then(|q| q.form.as_ref())
                    .and_then(|name| self.forms.get(name));
                if let (Some(form), Some("accept")) = (form, answer["action"].as_str()) {
                    let content = answer["content"].as_object();
                    let checked =
                        args_from_json(&form.params, content).and_then(|_| match &form.check {
                            Some(check) => {
                                check.check(&Value::Object(content.cloned().unwrap_or_default()))
                            }
                            None => Ok(()),
                        });
                    if let Err(error) = checked {
                        return Err(AskError::Refused(format!(
                            "the answer to \"{key}\" does not fit its form: {error}"
                        )));
                    }
                }
            }
            Ok(answers)
        })
    }
}
