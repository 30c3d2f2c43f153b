//! What a verified token says about its holder, from a JWT's payload or an introspection answer
//! (RFC 7662 uses the JWT claim names).

use serde_json::{Map, Value};

use crate::access::{Principal, Via};

/// A verified token's claims.
pub struct Claims {
    pub via: Via,
    pub values: Map<String, Value>,
}

impl Claims {
    fn string(&self, name: &str) -> Option<String> {
        self.values.get(name)?.as_str().map(str::to_string)
    }

    /// A claim that is a list of strings, or one string of space-separated ones (`scope`).
    fn strings(&self, name: &str) -> Vec<String> {
        match self.values.get(name) {
            Some(Value::String(text)) => text.split_whitespace().map(str::to_string).collect(),
            Some(Value::Array(items)) => items
                .iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Whether the `aud` claim (a string or a list) names `audience`.
    pub fn has_audience(&self, audience: &str) -> bool {
        self.strings("aud").iter().any(|aud| aud == audience)
    }

    pub fn principal(&self) -> Principal {
        let subject = self.string("sub");
        let client_id = self.string("client_id").or_else(|| self.string("azp"));
        let name = match (&subject, &client_id) {
            (Some(sub), _) => sub.clone(),
            (None, Some(client)) => format!("client:{client}"),
            (None, None) => "unnamed".into(),
        };
        let mut scopes = self.strings("scope");
        scopes.extend(self.strings("scp"));
        let mut groups = self.strings("groups");
        groups.extend(self.strings("roles"));
        Principal {
            name,
            via: self.via,
            key: None,
            subject,
            client_id,
            scopes,
            groups,
        }
    }
}
