//! The `requestState` of a 2026-07-28 call that asked the client something: the rounds answered
//! so far, sealed with an HMAC under a key only this process knows, bound to the request it
//! belongs to (method, name, arguments, principal) and valid for [`STATE_TTL`]. A client can
//! neither change a state nor use it for another request, tool, arguments or caller.

use std::time::Duration;

use rmcp::ErrorData as McpError;
use rmcp::model::{JsonObject, RequestStateCodec, SealOptions};
use sha2::{Digest, Sha256};

use crate::mcp::asking::Round;
use crate::mcp::audit::canonical_json;

/// How long a client may take to answer before its state expires.
pub const STATE_TTL: Duration = Duration::from_secs(10 * 60);

/// The most bytes of answers a state may carry: the client sends it back with every round.
const MAX_STATE_BYTES: usize = 256 * 1024;

/// Seals and opens request states.
pub struct Sealer {
    codec: RequestStateCodec,
}

impl Sealer {
    /// A sealer with `key`, which every moat serving the same clients shares.
    pub fn with_key(key: &[u8]) -> Result<Self, String> {
        RequestStateCodec::try_new(key.to_vec())
            .map(|codec| Self { codec })
            .map_err(|e| e.to_string())
    }
}

impl Default for Sealer {
    /// A sealer with a fresh random key: states do not outlive the process.
    fn default() -> Self {
        let mut key = [0u8; 32];
        getrandom::fill(&mut key).expect("the system has randomness");
        Self {
            codec: RequestStateCodec::try_new(key.to_vec()).expect("a 32-byte key is long enough"),
        }
    }
}

/// A request as a state is bound to it and as its audit line names it.
pub struct Binding<'a> {
    /// `tools/call`, `prompts/get` or `resources/read`.
    pub method: &'a str,
    /// The tool or prompt name, or the resource URI.
    pub name: &'a str,
    pub arguments: Option<&'a JsonObject>,
    pub principal: &'a str,
}

impl Binding<'_> {
    fn digest(&self) -> [u8; 32] {
        let arguments = self
            .arguments
            .map(|a| canonical_json(&serde_json::Value::Object(a.clone())))
            .unwrap_or_default();
        let mut hash = Sha256::new();
        for part in [self.method, self.name, &arguments, self.principal] {
            hash.update((part.len() as u64).to_be_bytes());
            hash.update(part.as_bytes());
        }
        hash.finalize().into()
    }
}

impl Sealer {
    /// The state for `rounds`, or an error when they are too large to hand out.
    pub fn seal(&self, binding: &Binding<'_>, rounds: &[Round]) -> Result<String, McpError> {
        let size: usize = rounds
            .iter()
            .flatten()
            .map(|(key, answer)| key.len() + answer.to_string().len())
            .sum();
        if size > MAX_STATE_BYTES {
            return Err(McpError::internal_error(
                format!(
                    "the client's answers are more than the {MAX_STATE_BYTES} bytes a call may keep"
                ),
                None,
            ));
        }
        let digest = binding.digest();
        let options = SealOptions::new().associated_data(&digest).ttl(STATE_TTL);
        self.codec
            .seal_json_with(&rounds, &options)
            .map_err(|e| McpError::internal_error(format!("sealing the request state: {e}"), None))
    }

    /// The rounds a state holds, if moat sealed it for this very request and it has not expired.
    pub fn open(&self, binding: &Binding<'_>, state: &str) -> Result<Vec<Round>, McpError> {
        if state.len() > 2 * MAX_STATE_BYTES {
            return Err(McpError::invalid_params("requestState is too large", None));
        }
        self.codec
            .open_json_with(state, &binding.digest())
            .map_err(|e| {
                McpError::invalid_params(
                    format!(
                        "requestState was not issued for this request, was altered or has \
                         expired ({e})"
                    ),
                    None,
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn binding<'a>(name: &'a str, arguments: Option<&'a JsonObject>) -> Binding<'a> {
        Binding {
            method: "tools/call",
            name,
            arguments,
            principal: "local",
        }
    }

    #[test]
    fn a_state_opens_only_for_its_own_request() {
        let sealer = Sealer::default();
        let rounds = vec![vec![("name".to_string(), json!({"action": "accept"}))]];
        let args = json!({"a": 1}).as_object().cloned();
        let state = sealer.seal(&binding("t", args.as_ref()), &rounds).unwrap();
        assert_eq!(
            sealer.open(&binding("t", args.as_ref()), &state).unwrap(),
            rounds
        );

        let other_args = json!({"a": 2}).as_object().cloned();
        assert!(
            sealer
                .open(&binding("t", other_args.as_ref()), &state)
                .is_err()
        );
        assert!(sealer.open(&binding("u", args.as_ref()), &state).is_err());
        let mut other_principal = binding("t", args.as_ref());
        other_principal.principal = "key:ci";
        assert!(sealer.open(&other_principal, &state).is_err());
        assert!(
            Sealer::default()
                .open(&binding("t", args.as_ref()), &state)
                .is_err()
        );

        let mut tampered = state.clone().into_bytes();
        let middle = tampered.len() / 2;
        tampered[middle] = if tampered[middle] == b'A' { b'B' } else { b'A' };
        let tampered = String::from_utf8(tampered).unwrap();
        assert!(
            sealer
                .open(&binding("t", args.as_ref()), &tampered)
                .is_err()
        );
    }
}
