//! A plugin's docs and errors name its functions and parameters as WIT spells them
//! (`list-allowed-directories`, `old-text`); the model only knows the MCP names
//! (`filesystem_list_allowed_directories`, `oldText`). [`References`] rewrites each mention that
//! is unmistakably one: a name in backticks, or a bare name of two words or more (a bare
//! one-word name is as likely an English word: `add`, `now`).

use std::borrow::Cow;
use std::collections::HashMap;

use crate::wit::naming::json_name;

/// The MCP names of a plugin's functions, by WIT name.
#[derive(Debug, Default)]
pub struct References {
    tools: HashMap<String, String>,
}

impl References {
    /// From each exported function's WIT name and the MCP name it is served under. A name two
    /// interfaces export, or a hidden function, is left as it is written.
    pub fn new<'a>(functions: impl Iterator<Item = (&'a str, Option<&'a str>)>) -> Self {
        let mut tools = HashMap::new();
        let mut ambiguous = Vec::new();
        for (function, name) in functions {
            if tools.contains_key(function) || ambiguous.contains(&function) {
                tools.remove(function);
                ambiguous.push(function);
                continue;
            }
            if let Some(name) = name {
                tools.insert(function.to_string(), name.to_string());
            }
        }
        Self { tools }
    }

    /// Whether `name` is the WIT name of a function served as a tool.
    pub fn is_tool(&self, name: &str) -> bool {
        self.tools.contains_key(name)
    }

    /// `text` with every mention of a function, or of one of `params` (WIT names), in its MCP
    /// form.
    pub fn rewrite<'t>(&self, text: &'t str, params: &[&str]) -> Cow<'t, str> {
        let name_of = |word: &str| -> Option<String> {
            if let Some(tool) = self.tools.get(word) {
                return Some(tool.clone());
            }
            params.contains(&word).then(|| json_name(word).into_owned())
        };
        let mut out = String::new();
        let mut copied = 0;
        let bytes = text.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            let quoted = bytes[i] == b'`';
            let start = i + usize::from(quoted);
            let end = if quoted {
                match text[start..].find('`') {
                    Some(len) => start + len,
                    None => break,
                }
            } else if is_word_byte(bytes[i]) && (i == 0 || !is_word_byte(bytes[i - 1])) {
                start
                    + text[start..]
                        .bytes()
                        .take_while(|b| is_word_byte(*b))
                        .count()
            } else {
                i += 1;
                continue;
            };
            let word = &text[start..end];
            // A bare word with a trailing hyphen (`re-` in `re-read`) is no name.
            let bare_ok = word.contains('-') && !word.ends_with('-');
            if (quoted || bare_ok)
                && let Some(name) = name_of(word)
            {
                out.push_str(&text[copied..start]);
                out.push_str(&name);
                copied = end;
            }
            i = end + usize::from(quoted);
        }
        if copied == 0 {
            return Cow::Borrowed(text);
        }
        out.push_str(&text[copied..]);
        Cow::Owned(out)
    }
}

/// A byte of a WIT identifier as prose holds it.
fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-'
}

#[cfg(test)]
mod tests {
    use super::*;

    fn references() -> References {
        References::new(
            [
                (
                    "list-allowed-directories",
                    Some("fs_list_allowed_directories"),
                ),
                ("add", Some("time_add")),
                ("secret", None),
                ("get", Some("a_get")),
                ("get", Some("b_get")),
            ]
            .into_iter(),
        )
    }

    #[test]
    fn names_in_backticks_and_bare_kebab_names_become_mcp_names() {
        let r = references();
        assert_eq!(
            r.rewrite(
                "Call `list-allowed-directories` (or list-allowed-directories) first; give \
                 `old-text` as old-text, then see `add`.",
                &["old-text"]
            ),
            "Call `fs_list_allowed_directories` (or fs_list_allowed_directories) first; give \
             `oldText` as oldText, then see `time_add`."
        );
    }

    #[test]
    fn words_that_only_look_like_names_stay() {
        let r = references();
        for text in [
            "add two numbers, now",
            "the list-allowed-directories-ish tool",
            "`secret` is hidden, `get` is ambiguous",
            "an unclosed `list-allowed-directories",
            "re-read it",
        ] {
            assert!(
                matches!(r.rewrite(text, &["read"]), Cow::Borrowed(_)),
                "{text}"
            );
        }
    }
}
