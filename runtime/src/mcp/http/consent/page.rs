//! The small HTML pages a caller's browser sees while connecting an account, and the cookie
//! that binds the browser to its flow.

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::upstream::consent::steps::random;

/// The cookie that binds a browser to the consent flows it began: `__Host-` (sent only to this
/// origin, over a secure context, for the whole site), HttpOnly (no script reads it), SameSite
/// Lax (a third party's redirect back is a top-level navigation, which carries it).
const COOKIE: &str = "__Host-moat-consent";

/// The browser's binding cookie, if it sent one.
pub fn browser(headers: &HeaderMap) -> Option<String> {
    crate::mcp::http::cookie(headers, COOKIE)
}

/// The browser's binding cookie, made now if it has none (then with the header that sets it).
pub fn bind(headers: &HeaderMap) -> Result<(String, Option<HeaderValue>), String> {
    if let Some(cookie) = browser(headers) {
        return Ok((cookie, None));
    }
    let cookie = random::<32>()?;
    let set = format!("{COOKIE}={cookie}; Path=/; Secure; HttpOnly; SameSite=Lax; Max-Age=600");
    let set = HeaderValue::from_str(&set).map_err(|e| e.to_string())?;
    Ok((cookie, Some(set)))
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A page saying `text`, under `title`.
pub fn page(status: StatusCode, title: &str, text: &str) -> Response {
    html(
        status,
        title,
        &format!("<p id=\"message\">{}</p>", escape(text)),
    )
}

/// The page that asks a principal no browser can prove to confirm, naming them and the source:
/// its form posts back with `token`, which only this browser could have been given.
pub fn confirmation(link: &str, principal: &str, source: &str, token: &str) -> Response {
    let body = format!(
        "<p id=\"message\">A call made as <b id=\"principal\">{principal}</b> asks to act for \
         you at <b id=\"source\">\"{source}\"</b>. Connect your account only if you made that \
         call: whoever connects here, every call {principal} makes acts as them.</p>\
         <form method=\"post\" action=\"/oauth/consent/{link}\">\
         <input type=\"hidden\" name=\"token\" value=\"{token}\">\
         <button type=\"submit\" id=\"confirm\">Connect my account as {principal}</button>\
         </form>",
        principal = escape(principal),
        source = escape(source),
        link = escape(link),
        token = escape(token),
    );
    html(StatusCode::OK, "Connect your account?", &body)
}

/// 303 to `location`, setting the binding cookie when it is new.
pub fn see_other(location: &str, cookie: Option<HeaderValue>) -> Response {
    let mut response = (StatusCode::SEE_OTHER, [(header::LOCATION, location)]).into_response();
    protect(&mut response, cookie);
    response
}

/// With the binding cookie when it is new.
pub fn setting(mut response: Response, cookie: Option<HeaderValue>) -> Response {
    if let Some(cookie) = cookie {
        response.headers_mut().append(header::SET_COOKIE, cookie);
    }
    response
}

fn html(status: StatusCode, title: &str, body: &str) -> Response {
    let title = escape(title);
    let text = format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>moat: {title}</title></head>\
         <body><h1>{title}</h1>{body}</body></html>\n"
    );
    let mut response = (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        text,
    )
        .into_response();
    protect(&mut response, None);
    response
}

/// Headers every consent page carries: never cached, never framed (a confirmation under
/// another site's overlay is a click taken), no script, no referrer carrying a state onward.
fn protect(response: &mut Response, cookie: Option<HeaderValue>) {
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("default-src 'none'; frame-ancestors 'none'"),
    );
    if let Some(cookie) = cookie {
        headers.append(header::SET_COOKIE, cookie);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_binding_cookie_is_read_among_others_and_made_when_missing() {
        let mut headers = HeaderMap::new();
        let (made, set) = bind(&headers).unwrap();
        let set = set.unwrap();
        let set = set.to_str().unwrap();
        assert!(set.starts_with(&format!(
            "__Host-moat-consent={made}; Path=/; Secure; HttpOnly"
        )));
        assert!(set.contains("SameSite=Lax"));
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; __Host-moat-consent=abc; b=2"),
        );
        assert_eq!(bind(&headers).unwrap(), ("abc".to_string(), None));
        headers.insert(header::COOKIE, HeaderValue::from_static("moat-consent=abc"));
        assert_eq!(browser(&headers), None);
    }

    #[tokio::test]
    async fn a_confirmation_names_the_principal_and_the_source_escaped() {
        let response = confirmation("L", "key:<ci>", "tracker", "T");
        assert_eq!(
            response.headers()[header::X_FRAME_OPTIONS],
            HeaderValue::from_static("DENY")
        );
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        let body = String::from_utf8(body.to_vec()).unwrap();
        assert!(body.contains("key:&lt;ci&gt;"), "{body}");
        assert!(body.contains("action=\"/oauth/consent/L\""), "{body}");
        assert!(body.contains("name=\"token\" value=\"T\""), "{body}");
    }
}
