//! The `text` plugin: hashes, base64, regular expressions, JSON Pointer queries and statistics.

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use base64::{DecodeError, Engine as _, alphabet};
use md5::Md5;
use regex::Regex;
use serde_json::Value;
use sha1::Sha1;
use sha2::{Digest, Sha256, Sha512};

moat_guest::generate!("text");

use exports::moat::text::tools::{Algorithm, Encoding, Guest, Match, TextStats};

/// Decodes standard base64 with or without padding (URL-safe input is mapped to it first).
const ANY_PADDING: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

struct Text;

impl Guest for Text {
    fn hash(text: String, algorithm: Algorithm, encoding: Option<Encoding>) -> String {
        let bytes = text.as_bytes();
        let digest = match algorithm {
            Algorithm::Sha256 => Sha256::digest(bytes).to_vec(),
            Algorithm::Sha512 => Sha512::digest(bytes).to_vec(),
            Algorithm::Sha1 => Sha1::digest(bytes).to_vec(),
            Algorithm::Md5 => Md5::digest(bytes).to_vec(),
        };
        match encoding.unwrap_or(Encoding::Hex) {
            Encoding::Hex => digest.iter().map(|b| format!("{b:02x}")).collect(),
            Encoding::Base64 => STANDARD.encode(digest),
        }
    }

    fn base64_encode(text: String, url_safe: Option<bool>) -> String {
        if url_safe.unwrap_or(false) {
            URL_SAFE_NO_PAD.encode(text)
        } else {
            STANDARD.encode(text)
        }
    }

    fn base64_decode(data: String) -> Result<String, String> {
        let mut standard = String::with_capacity(data.len());
        for c in data.chars().filter(|c| !c.is_whitespace()) {
            standard.push(match c {
                'A'..='Z' | 'a'..='z' | '0'..='9' | '+' | '/' | '=' => c,
                // The URL-safe alphabet differs from the standard one in these two characters only.
                '-' => '+',
                '_' => '/',
                _ => return Err(format!("not valid base64: {c:?} is not a base64 character")),
            });
        }
        let bytes = ANY_PADDING.decode(&standard).map_err(|e| match e {
            DecodeError::InvalidByte(_, b'=') | DecodeError::InvalidPadding => {
                "not valid base64: `=` padding may only end the data".to_string()
            }
            DecodeError::InvalidLength(_) => {
                "not valid base64: one character too many or too few at the end".to_string()
            }
            DecodeError::InvalidLastSymbol(..) => {
                "not valid base64: the last character has stray bits (truncated or corrupted data)"
                    .to_string()
            }
            other => format!("not valid base64: {other}"),
        })?;
        String::from_utf8(bytes).map_err(|e| {
            format!(
                "the data decodes to {} bytes that are not UTF-8 text",
                e.as_bytes().len()
            )
        })
    }

    fn regex_find(pattern: String, text: String, limit: Option<u32>) -> Result<Vec<Match>, String> {
        let regex = compile(&pattern)?;
        let limit = limit.map_or(usize::MAX, |n| n as usize);
        let mut offsets = CharOffsets::new(&text);
        Ok(regex
            .captures_iter(&text)
            .take(limit)
            .map(|captures| {
                let whole = captures.get(0).expect("group 0 is the whole match");
                Match {
                    start: offsets.at(whole.start()),
                    end: offsets.at(whole.end()),
                    text: whole.as_str().to_string(),
                    groups: captures
                        .iter()
                        .skip(1)
                        .map(|group| group.map(|g| g.as_str().to_string()))
                        .collect(),
                }
            })
            .collect())
    }

    fn regex_replace(
        pattern: String,
        text: String,
        replacement: String,
        limit: Option<u32>,
    ) -> Result<String, String> {
        let regex = compile(&pattern)?;
        let limit = match limit {
            Some(0) => return Ok(text),
            Some(n) => n as usize,
            None => 0, // `replacen` reads 0 as "all"
        };
        Ok(regex
            .replacen(&text, limit, replacement.as_str())
            .into_owned())
    }

    fn json_query(json: String, pointer: String) -> Result<String, String> {
        let document: Value =
            serde_json::from_str(&json).map_err(|e| format!("invalid JSON: {e}"))?;
        if !pointer.is_empty() && !pointer.starts_with('/') {
            return Err(format!(
                "invalid JSON Pointer {pointer:?}: it must be empty or start with `/`"
            ));
        }
        // Walked by hand rather than with `Value::pointer`, to say where the path stops.
        let mut value = &document;
        let mut at = String::new();
        for token in pointer.split('/').skip(1) {
            let key = token.replace("~1", "/").replace("~0", "~");
            value =
                match value {
                    Value::Object(object) => object.get(&key).ok_or_else(|| {
                        format!("the object at {} has no key {key:?}", place(&at))
                    })?,
                    Value::Array(items) => array_index(&key)
                        .and_then(|i| items.get(i))
                        .ok_or_else(|| {
                            format!(
                                "the array at {} has {} items; {key:?} is not the index of one \
                             (they start at 0)",
                                place(&at),
                                items.len(),
                            )
                        })?,
                    scalar => {
                        let kind = match scalar {
                            Value::String(_) => "a string",
                            Value::Number(_) => "a number",
                            Value::Bool(_) => "a boolean",
                            _ => "null",
                        };
                        return Err(format!(
                            "the value at {} is {kind}, not an object or array",
                            place(&at)
                        ));
                    }
                };
            at.push('/');
            at.push_str(token);
        }
        Ok(value.to_string())
    }

    fn stats(text: String) -> TextStats {
        // Canonical ABI strings are shorter than 4 GiB, so every count fits in a u32.
        TextStats {
            characters: text.chars().count() as u32,
            words: text.split_whitespace().count() as u32,
            lines: text.lines().count() as u32,
            bytes: text.len() as u32,
        }
    }
}

fn compile(pattern: &str) -> Result<Regex, String> {
    Regex::new(pattern).map_err(|e| format!("invalid regular expression: {e}"))
}

/// Turns increasing byte offsets into character offsets, counting each character once.
struct CharOffsets<'a> {
    text: &'a str,
    byte: usize,
    chars: u32,
}

impl<'a> CharOffsets<'a> {
    fn new(text: &'a str) -> Self {
        Self {
            text,
            byte: 0,
            chars: 0,
        }
    }

    /// The character offset of `byte`, which is no smaller than the one asked for before.
    fn at(&mut self, byte: usize) -> u32 {
        self.chars += self.text[self.byte..byte].chars().count() as u32;
        self.byte = byte;
        self.chars
    }
}

/// An RFC 6901 array index: `0`, or digits without a leading zero.
fn array_index(token: &str) -> Option<usize> {
    let canonical = token == "0" || !token.starts_with('0');
    let digits = !token.is_empty() && token.bytes().all(|b| b.is_ascii_digit());
    (canonical && digits).then(|| token.parse().ok()).flatten()
}

/// A pointer prefix, as error messages name it.
fn place(pointer: &str) -> String {
    if pointer.is_empty() {
        "the root".to_string()
    } else {
        format!("`{pointer}`")
    }
}

export!(Text);
