//! Deciding one request: its entities and context put to Cedar's authorizer, the answer as a
//! [`Verdict`] naming the policies that decided; with the arguments unknown, for lists; and the
//! binding of a call's requests to its caller's policies.

use std::sync::Arc;

use cedar_policy::{
    Authorizer, Context, Decision, Entities, Entity, EntityUid, PolicyId, PolicySet, Request,
    RestrictedExpression,
};

use super::{Facts, Loaded, Outgoing, Policies, Target, Verdict, model};
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

/// The plugin a tool, prompt or resource entity is in (its `plugin` attribute).
pub(super) fn plugin_name(entity: &Entity) -> Option<String> {
    match entity.attr("plugin")?.ok()? {
        cedar_policy::EvalResult::String(name) => Some(name),
        _ => None,
    }
}

/// Principals' entities kept at most, before the cache starts again.
const MAX_PRINCIPALS: usize = 4096;

impl Loaded {
    pub(super) fn unknown(&self, what: &str) -> Verdict {
        Verdict::Denied {
            by: vec![],
            message: format!(
                "denied: {what} is not among what the policies were loaded for; try again"
            ),
        }
    }

    /// `principal`'s entity: made again only when the principal of that name changed (another
    /// token's groups or claims).
    fn principal_entity(&self, principal: &Principal) -> Entity {
        let mut made = self.principals.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((known, entity)) = made.get(&principal.name)
            && known == principal
        {
            return entity.clone();
        }
        let entity = model::principal(principal, &self.claims);
        if made.len() >= MAX_PRINCIPALS {
            made.clear();
        }
        made.insert(principal.name.clone(), (principal.clone(), entity.clone()));
        entity
    }

    pub(super) fn decide(
        &self,
        principal: &Principal,
        target: &Target,
        (name, value): (&str, RestrictedExpression),
        facts: &Facts,
        what: &str,
    ) -> Verdict {
        let mut context = model::common_context(facts);
        context.push((name.to_string(), value));
        let (action, resource) = (target.action.uid(), target.resource.uid());
        let entities = (target.entities.clone(), &target.policies);
        self.decide_with(principal, (action, resource), entities, context, what)
    }

    /// The verdict of `policies` on `principal` doing `action` to `resource`, `entities` holding
    /// all but the principal's.
    pub(super) fn decide_with(
        &self,
        principal: &Principal,
        (action, resource): (EntityUid, EntityUid),
        (entities, policies): (Entities, &PolicySet),
        context: Vec<(String, RestrictedExpression)>,
        what: &str,
    ) -> Verdict {
        let (request, entities) =
            match self.request(principal, (action, resource), entities, context) {
                Ok(made) => made,
                Err(why) => {
                    return Verdict::Denied {
                        by: vec![],
                        message: format!(
                            "denied: moat could not put the request to the policies: {why}"
                        ),
                    };
                }
            };
        let response = Authorizer::new().is_authorized(&request, policies, &entities);
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

    /// The request of `principal` doing `action` to `resource` in `context`, and `entities`
    /// with the principal's added.
    fn request(
        &self,
        principal: &Principal,
        (action, resource): (EntityUid, EntityUid),
        entities: Entities,
        context: Vec<(String, RestrictedExpression)>,
    ) -> Result<(Request, Entities), String> {
        let who = self.principal_entity(principal);
        let principal_uid = who.uid();
        let context = Context::from_pairs(context).map_err(|e| e.to_string())?;
        let request = Request::new(principal_uid, action, resource, context, None)
            .map_err(|e| e.to_string())?;
        let entities = entities
            .add_entities([who], None)
            .map_err(|e| e.to_string())?;
        Ok((request, entities))
    }

    /// Whether some value of the context attribute `unknown` could let `principal` do what
    /// `target` is for: Cedar's partial evaluation is not a sure denial.
    pub(super) fn could_allow(
        &self,
        principal: &Principal,
        target: &Target,
        unknown: &str,
        facts: &Facts,
    ) -> bool {
        let mut context = model::common_context(facts);
        context.push((
            unknown.to_string(),
            RestrictedExpression::new_unknown(unknown),
        ));
        let on = (target.action.uid(), target.resource.uid());
        let entities = target.entities.clone();
        let Ok((request, entities)) = self.request(principal, on, entities, context) else {
            return false;
        };
        let response =
            Authorizer::new().is_authorized_partial(&request, &target.policies, &entities);
        response.decision() != Some(Decision::Deny)
    }
}
