//! The URI templates of resource templates (RFC 6570 level 1: `{name}` expressions only), and
//! matching a URI against one to find its variables.
//!
//! A level-1 expansion percent-encodes every character outside the unreserved set, so a
//! variable's value never holds `/` or any literal that follows it: a URI matches when each
//! literal is found in turn and each variable's part is non-empty and unreserved or
//! percent-encoded.

use anyhow::{Result, bail};

/// A parsed URI template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UriTemplate {
    parts: Vec<Part>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Part {
    Literal(String),
    Variable(String),
}

impl UriTemplate {
    /// Parses `template`; an operator (`{+x}`, `{/x}`…), an empty or unclosed expression, or two
    /// variables in a row (which no URI could tell apart) is an error.
    pub fn parse(template: &str) -> Result<Self> {
        let mut parts = Vec::new();
        let mut rest = template;
        while !rest.is_empty() {
            match rest.find('{') {
                Some(0) => {
                    let Some(end) = rest.find('}') else {
                        bail!("URI template \"{template}\" has an unclosed `{{`");
                    };
                    let name = &rest[1..end];
                    let valid = !name.is_empty()
                        && name
                            .chars()
                            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.');
                    if !valid {
                        bail!(
                            "URI template \"{template}\": `{{{name}}}` must name one variable of \
                             letters, digits, `_` or `.` (no operators)"
                        );
                    }
                    if matches!(parts.last(), Some(Part::Variable(_))) {
                        bail!("URI template \"{template}\" has two variables with nothing between");
                    }
                    parts.push(Part::Variable(name.to_string()));
                    rest = &rest[end + 1..];
                }
                found => {
                    let end = found.unwrap_or(rest.len());
                    if rest[..end].contains('}') {
                        bail!("URI template \"{template}\" has a `}}` with no `{{`");
                    }
                    parts.push(Part::Literal(rest[..end].to_string()));
                    rest = &rest[end..];
                }
            }
        }
        Ok(Self { parts })
    }

    /// The variables, in order.
    pub fn variables(&self) -> impl Iterator<Item = &str> {
        self.parts.iter().filter_map(|part| match part {
            Part::Variable(name) => Some(name.as_str()),
            Part::Literal(_) => None,
        })
    }

    /// Whether the template has no variables at all.
    pub fn is_fixed(&self) -> bool {
        self.variables().next().is_none()
    }

    /// The values of the variables when `uri` is an expansion of this template, decoded.
    pub fn matches(&self, uri: &str) -> Option<Vec<(String, String)>> {
        let mut values = Vec::new();
        let mut rest = uri;
        let mut parts = self.parts.iter().peekable();
        while let Some(part) = parts.next() {
            match part {
                Part::Literal(literal) => rest = rest.strip_prefix(literal.as_str())?,
                Part::Variable(name) => {
                    let end = match parts.peek() {
                        Some(Part::Literal(next)) => rest.find(next.as_str())?,
                        _ => rest.len(),
                    };
                    let raw = &rest[..end];
                    if raw.is_empty() {
                        return None;
                    }
                    values.push((name.clone(), decode(raw)?));
                    rest = &rest[end..];
                }
            }
        }
        rest.is_empty().then_some(values)
    }
}

impl std::fmt::Display for UriTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for part in &self.parts {
            match part {
                Part::Literal(text) => f.write_str(text)?,
                Part::Variable(name) => write!(f, "{{{name}}}")?,
            }
        }
        Ok(())
    }
}

/// Decodes a variable's part: unreserved characters and `%XX` escapes only, as a level-1
/// expansion produces, into UTF-8.
fn decode(raw: &str) -> Option<String> {
    let mut bytes = Vec::with_capacity(raw.len());
    let mut chars = raw.bytes();
    while let Some(byte) = chars.next() {
        match byte {
            b'%' => {
                let hex = [chars.next()?, chars.next()?];
                let hex = std::str::from_utf8(&hex).ok()?;
                bytes.push(u8::from_str_radix(hex, 16).ok()?);
            }
            b if b.is_ascii_alphanumeric() || b"-._~".contains(&b) => bytes.push(b),
            _ => return None,
        }
    }
    String::from_utf8(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(template: &str, uri: &str) -> Option<Vec<(String, String)>> {
        UriTemplate::parse(template).unwrap().matches(uri)
    }

    #[test]
    fn variables_are_found_between_literals_and_decoded() {
        assert_eq!(
            values("template/{id}/data", "template/123/data"),
            Some(vec![("id".into(), "123".into())])
        );
        assert_eq!(
            values("notes/{name}", "notes/a%20b%2Fc"),
            Some(vec![("name".into(), "a b/c".into())])
        );
        assert_eq!(
            values("{a}-{b}", "x-y"),
            Some(vec![("a".into(), "x".into()), ("b".into(), "y".into())])
        );
    }

    #[test]
    fn a_uri_that_is_no_expansion_does_not_match() {
        assert_eq!(values("template/{id}/data", "template//data"), None);
        assert_eq!(values("template/{id}/data", "template/1/2/data"), None);
        assert_eq!(values("template/{id}/data", "template/1/data/more"), None);
        assert_eq!(values("notes/{name}", "notes/a b"), None);
        assert_eq!(values("notes/{name}", "notes/%zz"), None);
        assert_eq!(values("static", "static"), Some(vec![]));
        assert_eq!(values("static", "statics"), None);
    }

    #[test]
    fn templates_beyond_level_one_are_refused() {
        for bad in ["a/{+path}", "a/{", "a/{}", "a}b", "{a}{b}", "a/{x-y}"] {
            assert!(UriTemplate::parse(bad).is_err(), "{bad}");
        }
        let template = UriTemplate::parse("t/{id}/d").unwrap();
        assert_eq!(template.to_string(), "t/{id}/d");
        assert_eq!(template.variables().collect::<Vec<_>>(), ["id"]);
    }
}
