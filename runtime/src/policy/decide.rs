//! Deciding one request: its entities and context put to Cedar's authorizer, the answer as a
//! [`Verdict`] naming the policies that decided; with the arguments unknown, for lists; and the
//! binding of a call's requests to its caller's policies.

use std::sync::Arc;

use cedar_policy::{
    Authorizer, Context, Decision, Entities, Entity, EntityUid, PolicyId, Request,
    RestrictedExpression,
};

use super::{Facts, Loaded, Outgoing, Policies, Verdict, model};
use crate::access::Principal;

/// One call's `reach`: where its requests may go, for its caller.
struct CallerReach {
    policies: Policies,
    principal: Principal,
    plugin: String,
    tool: String,
    facts: Facts,
}

impl crate::sandbox::network::CallReach for CallerReach {
    fn allows(&self, request: &Outgoing<'_>) -> Result<(), String> {
        match self.policies.reach(
            &self.principal,
            &self.plugin,
            &self.tool,
            request,
            &self.facts,
        ) {
            Verdict::Allowed { .. } => Ok(()),
            Verdict::Denied { message, .. } | Verdict::Invalid(message) => Err(message),
        }
    }
}

impl Policies {
    /// The policy over the requests of `principal`'s call of `tool` (of `plugin`), for the
    /// sandbox to ask; none when no policy is given, and the grants alone decide.
    pub fn reach_of(
        &self,
        principal: &Principal,
        plugin: &str,
        tool: &str,
        facts: &Facts,
    ) -> Option<Arc<dyn crate::sandbox::network::CallReach>> {
        self.loaded.as_ref()?;
        Some(Arc::new(CallerReach {
            policies: self.clone(),
            principal: principal.clone(),
            plugin: plugin.to_string(),
            tool: tool.to_string(),
            facts: facts.clone(),
        }))
    }
}

impl Loaded {
    pub(super) fn unknown(&self, what: &str) -> Verdict {
        Verdict::Denied {
            by: vec![],
            message: format!(
                "denied: {what} is not among what the policies were loaded for; try again"
            ),
        }
    }

    pub(super) fn plugin_of(&self, entity: &Entity) -> Option<Entity> {
        let plugin = entity.attr("plugin")?.ok()?;
        let cedar_policy::EvalResult::String(name) = plugin else {
            return None;
        };
        self.plugins.get(&name).cloned()
    }

    pub(super) fn decide(
        &self,
        principal: &Principal,
        action: &Entity,
        resource: &Entity,
        (name, value): (&str, RestrictedExpression),
        facts: &Facts,
        what: &str,
    ) -> Verdict {
        let mut context = model::common_context(facts);
        context.push((name.to_string(), value));
        let extra = self
            .plugin_of(resource)
            .into_iter()
            .chain([action.clone()])
            .collect();
        self.decide_with(
            principal,
            action.uid(),
            resource.clone(),
            extra,
            context,
            what,
        )
    }

    pub(super) fn decide_with(
        &self,
        principal: &Principal,
        action: EntityUid,
        resource: Entity,
        extra: Vec<Entity>,
        context: Vec<(String, RestrictedExpression)>,
        what: &str,
    ) -> Verdict {
        let who = model::principal(principal, &self.claims);
        let (principal_uid, resource_uid) = (who.uid(), resource.uid());
        let entities = [who, resource].into_iter().chain(extra);
        let request = Context::from_pairs(context)
            .map_err(|e| e.to_string())
            .and_then(|context| {
                Request::new(principal_uid, action, resource_uid, context, None)
                    .map_err(|e| e.to_string())
            });
        let entities = Entities::from_entities(entities, None).map_err(|e| e.to_string());
        let (request, entities) = match (request, entities) {
            (Ok(request), Ok(entities)) => (request, entities),
            (Err(why), _) | (_, Err(why)) => {
                return Verdict::Denied {
                    by: vec![],
                    message: format!(
                        "denied: moat could not put the request to the policies: {why}"
                    ),
                };
            }
        };
        let response = Authorizer::new().is_authorized(&request, &self.set, &entities);
        for error in response.diagnostics().errors() {
            tracing::warn!("a policy failed while deciding: {error}");
        }
        let by: Vec<String> = response
            .diagnostics()
            .reason()
            .map(PolicyId::to_string)
            .collect();
        match response.decision() {
            Decision::Allow => Verdict::Allowed { by },
            Decision::Deny if by.is_empty() => Verdict::Denied {
                by,
                message: format!("denied: no policy permits {} to {what}", principal.name),
            },
            Decision::Deny => {
                let reasons: Vec<String> = by
                    .iter()
                    .map(|id| match self.reasons.get(id) {
                        Some(reason) => format!("denied by policy `{id}`: {reason}"),
                        None => format!("denied by policy `{id}`"),
                    })
                    .collect();
                Verdict::Denied {
                    message: reasons.join("; "),
                    by,
                }
            }
        }
    }

    pub(super) fn could_allow(
        &self,
        principal: &Principal,
        action: &Entity,
        resource: &Entity,
        unknown: &str,
        facts: &Facts,
    ) -> bool {
        let mut context = model::common_context(facts);
        context.push((
            unknown.to_string(),
            RestrictedExpression::new_unknown(unknown),
        ));
        let who = model::principal(principal, &self.claims);
        let (principal_uid, resource_uid) = (who.uid(), resource.uid());
        let entities = [who, resource.clone(), action.clone()]
            .into_iter()
            .chain(self.plugin_of(resource));
        let (Ok(context), Ok(entities)) = (
            Context::from_pairs(context),
            Entities::from_entities(entities, None),
        ) else {
            return false;
        };
        let Ok(request) = Request::new(principal_uid, action.uid(), resource_uid, context, None)
        else {
            return false;
        };
        let response = Authorizer::new().is_authorized_partial(&request, &self.set, &entities);
        response.decision() != Some(Decision::Deny)
    }
}
