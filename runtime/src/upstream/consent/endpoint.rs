//! The third party's token endpoint: a code or a refresh token traded for tokens.

use serde::Deserialize;

use super::Settings;
use crate::access::oauth::client::post_form;

/// What a token endpoint answers.
#[derive(Deserialize)]
pub struct Tokened {
    pub access_token: String,
    pub refresh_token: Option<String>,
    pub expires_in: Option<u64>,
}

#[derive(Deserialize)]
struct Refused {
    error: String,
    error_description: Option<String>,
}

/// Why no tokens came.
#[derive(Debug, PartialEq)]
pub enum Failure {
    /// The grant is no good (`invalid_grant`: revoked, expired, used already): only the
    /// person can give a new one.
    Grant(String),
    /// Anything else (unreachable, slow, a 5xx, nonsense): the grant may still be good.
    Failed(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Grant(why) | Self::Failed(why) => f.write_str(why),
        }
    }
}

impl From<Failure> for String {
    fn from(failure: Failure) -> Self {
        failure.to_string()
    }
}

/// Posts `form` to `settings`' token endpoint, as moat's client there.
pub async fn request(
    http: &reqwest::Client,
    settings: &Settings,
    form: &[(&str, &str)],
) -> Result<Tokened, Failure> {
    let endpoint = &settings.token_endpoint;
    let id = (&*settings.client_id, settings.client_secret.as_deref());
    let (status, body) = post_form(http, endpoint, id, form)
        .await
        .map_err(|e| Failure::Failed(format!("asking {endpoint} for tokens failed: {e}")))?;
    if !status.is_success() {
        let refused = serde_json::from_slice::<Refused>(&body).ok();
        let why = match &refused {
            Some(r) => crate::upstream::exchange::plain(&match &r.error_description {
                Some(d) => format!("{} ({d})", r.error),
                None => r.error.clone(),
            }),
            None => format!("HTTP {status}"),
        };
        let why = format!("{endpoint} refused to give tokens: {why}");
        return Err(match refused {
            Some(r) if r.error == "invalid_grant" => Failure::Grant(why),
            _ => Failure::Failed(why),
        });
    }
    serde_json::from_slice(&body)
        .map_err(|e| Failure::Failed(format!("{endpoint} answered no tokens: {e}")))
}
