//! What a verified token says about its holder, from a JWT's payload or an introspection answer
//! (RFC 7662 uses the JWT claim names).
//!
//! A token's principal is named so that no token can take the name of an API key (`key:NAME`),
//! the local token (`local`) or the names moat gives callers without a token (`stdio`,
//! `anonymous`): quotas, tasks and request states are keyed by that name, and an issuer's user
//! whose `sub` is `key:ci` must not become the CI job.

use serde_json::{Map, Value};

use crate::access::oauth::TokenError;
use crate::access::{Principal, Via};

/// The names moat gives principals that hold no token.
const NAMES_OF_OTHERS: [&str; 3] = ["local", "stdio", "anonymous"];

/// A verified token's claims.
pub struct Claims {
    pub via: Via,
    pub values: Map<String, Value>,
}

impl Claims {
    fn string(&self, name: &str) -> Option<String> {
        self.values.get(name)?.as_str().map(str::to_string)
    }

    /// A claim that is a list of strings, or one string.
    fn list(&self, name: &str) -> Vec<String> {
        match self.values.get(name) {
            Some(Value::String(text)) => vec![text.clone()],
            Some(Value::Array(items)) => items
                .iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect(),
            _ => Vec::new(),
        }
    }

    /// A claim that is a list of strings, or one string of space-separated ones: `scope` (RFC
    /// 9068, RFC 7662) and `scp` are written so; `groups`, `roles` and `aud` are not.
    fn spaced_list(&self, name: &str) -> Vec<String> {
        match self.values.get(name) {
            Some(Value::String(text)) => text.split_whitespace().map(str::to_string).collect(),
            _ => self.list(name),
        }
    }

    /// Whether the `aud` claim (a string or a list) names `audience`.
    pub fn has_audience(&self, audience: &str) -> bool {
        self.list("aud").iter().any(|aud| aud == audience)
    }

    /// The token's holder. A token that names neither a subject nor a client is refused: it
    /// could not be told from another such token, and would share its quota and its tasks.
    pub fn principal(&self) -> Result<Principal, TokenError> {
        let subject = self.string("sub");
        let client_id = self.string("client_id").or_else(|| self.string("azp"));
        let name = match (&subject, &client_id) {
            (Some(sub), _) => principal_name(sub),
            (None, Some(client)) => format!("client:{client}"),
            (None, None) => {
                return Err(TokenError::Invalid(
                    "the token names neither a subject (sub) nor a client (client_id)".into(),
                ));
            }
        };
        let mut scopes = self.spaced_list("scope");
        scopes.extend(self.spaced_list("scp"));
        let mut groups = self.list("groups");
        groups.extend(self.list("roles"));
        Ok(Principal {
            name,
            via: self.via,
            key: None,
            subject,
            client_id,
            scopes,
            groups,
            claims: self.values.clone(),
        })
    }
}

/// The principal name of the subject `sub`: itself when it is a plain name, else `sub:SUB`. A
/// plain name has no `:` (every name moat makes for other principals but the ones in
/// [`NAMES_OF_OTHERS`] has one: `key:…`, `client:…`, `sub:…`) and is not one of those.
fn principal_name(sub: &str) -> String {
    if sub.contains(':') || NAMES_OF_OTHERS.contains(&sub) {
        format!("sub:{sub}")
    } else {
        sub.to_string()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn principal(values: Value) -> Result<Principal, TokenError> {
        let Value::Object(values) = values else {
            panic!("claims are an object")
        };
        Claims {
            via: Via::Jwt,
            values,
        }
        .principal()
    }

    fn name(values: Value) -> String {
        principal(values).unwrap().name
    }

    #[test]
    fn no_token_takes_the_name_of_an_api_key_or_the_local_token() {
        let others = [
            Principal::api_key("ci").name,
            Principal::local().name,
            Principal::stdio("stdio").name,
            Principal::anonymous().name,
        ];
        for sub in [
            "key:ci",
            "local",
            "stdio",
            "anonymous",
            "client:ci",
            "sub:alice",
        ] {
            let name = name(json!({"sub": sub}));
            assert!(!others.contains(&name), "sub {sub} became {name}");
            assert_eq!(name, format!("sub:{sub}"));
        }
        // Distinct subjects stay distinct, and a plain one keeps its name.
        assert_eq!(name(json!({"sub": "alice"})), "alice");
        assert_ne!(
            name(json!({"sub": "client:ci"})),
            name(json!({"client_id": "ci"}))
        );
        assert_eq!(name(json!({"client_id": "ci"})), "client:ci");
        // The subject itself is kept as the token gave it, for `subject` rules.
        let principal = principal(json!({"sub": "key:ci"})).unwrap();
        assert_eq!(principal.subject.as_deref(), Some("key:ci"));
        assert_eq!(principal.key, None);
    }

    #[test]
    fn a_token_naming_nobody_is_refused() {
        let error = principal(json!({"scope": "tools"})).unwrap_err();
        assert!(matches!(error, TokenError::Invalid(why) if why.contains("neither a subject")));
    }

    #[test]
    fn one_string_is_one_group_but_scopes_are_split() {
        let principal = principal(json!({
            "sub": "alice",
            "groups": "Finance Admins",
            "roles": ["Ops Team", "eng"],
            "scope": "tools admin",
            "scp": "read",
        }))
        .unwrap();
        assert_eq!(principal.groups, ["Finance Admins", "Ops Team", "eng"]);
        assert_eq!(principal.scopes, ["tools", "admin", "read"]);
    }

    #[test]
    fn an_audience_string_is_one_audience() {
        let claims = |aud: Value| Claims {
            via: Via::Introspection,
            values: Map::from_iter([("aud".to_string(), aud)]),
        };
        let mine = "https://tools.example.com/mcp";
        assert!(claims(json!(mine)).has_audience(mine));
        assert!(claims(json!(["https://other", mine])).has_audience(mine));
        assert!(!claims(json!(format!("https://other {mine}"))).has_audience(mine));
    }
}
