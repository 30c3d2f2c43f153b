//! Answers from the authorization server, read with a cap: a server that sends more, whether
//! or not it says so in `Content-Length`, is cut off at the cap instead of filling memory.

/// The largest answer read: key sets, metadata and introspection answers are a few KiB.
pub const MAX_ANSWER_BYTES: usize = 1 << 20;

/// `response`'s body, or why it was not read.
pub async fn read_capped(mut response: reqwest::Response) -> Result<Vec<u8>, String> {
    let too_large = || "the answer is larger than 1 MiB".to_string();
    if response
        .content_length()
        .is_some_and(|n| n > MAX_ANSWER_BYTES as u64)
    {
        return Err(too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| e.to_string())? {
        if body.len() + chunk.len() > MAX_ANSWER_BYTES {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
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
