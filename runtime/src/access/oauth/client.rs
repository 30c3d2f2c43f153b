//! moat as an OAuth client: the random values and PKCE pair a flow needs, the authorization
//! request a browser is sent to, and the form it posts to a token endpoint. Used for moat's own
//! sign-in ([`super::sign_in`]) and for a caller's consent at a third party
//! (`upstream::consent`).

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest, Sha256};

use super::body::read_capped;

/// `N` random bytes, base64url.
pub fn random<const N: usize>() -> Result<String, String> {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes).map_err(|e| format!("no randomness: {e}"))?;
    Ok(URL_SAFE_NO_PAD.encode(bytes))
}

/// A PKCE verifier (RFC 7636: 43 to 128 characters) and its S256 challenge.
pub fn pkce() -> Result<(String, String), String> {
    let verifier = random::<32>()?;
    let challenge = URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()));
    Ok((verifier, challenge))
}

/// The authorization request (code flow, PKCE S256) at `endpoint` for `client_id`, coming back
/// to `redirect_uri` with `state`, with `extra` parameters (scope, resource) appended.
pub fn authorization_url(
    endpoint: &str,
    (client_id, redirect_uri): (&str, &str),
    (state, challenge): (&str, &str),
    extra: &[(&str, &str)],
) -> Result<String, String> {
    let mut url = reqwest::Url::parse(endpoint)
        .map_err(|e| format!("the authorization endpoint is not a URL: {e}"))?;
    url.query_pairs_mut()
        .append_pair("response_type", "code")
        .append_pair("client_id", client_id)
        .append_pair("redirect_uri", redirect_uri)
        .append_pair("state", state)
        .append_pair("code_challenge", challenge)
        .append_pair("code_challenge_method", "S256")
        .extend_pairs(extra);
    Ok(url.into())
}

/// Posts `form` to a token `endpoint` as the client `client_id`: with HTTP Basic for a
/// confidential client (`client_secret_basic`), the id in the form for a public one. The
/// status and the capped body, or why there is none.
pub async fn post_form(
    http: &reqwest::Client,
    endpoint: &str,
    (client_id, client_secret): (&str, Option<&str>),
    form: &[(&str, &str)],
) -> Result<(reqwest::StatusCode, Vec<u8>), String> {
    let mut form = form.to_vec();
    let mut request = http.post(endpoint);
    match client_secret {
        Some(secret) => request = request.basic_auth(client_id, Some(secret)),
        None => form.push(("client_id", client_id)),
    }
    let response = request
        .form(&form)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status();
    Ok((status, read_capped(response).await?))
}
