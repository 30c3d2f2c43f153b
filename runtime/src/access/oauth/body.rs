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
