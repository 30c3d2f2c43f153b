//! The server's `instructions`, the MCP field a host hands the model before any tool: what
//! moat is, then what each plugin the caller may use says of itself (its WIT world's doc
//! comment), bounded so that no plugin can fill the model's context.

/// The most one plugin's summary adds.
pub const MAX_SUMMARY_BYTES: usize = 1024;
/// The most the whole text may be.
pub const MAX_INSTRUCTIONS_BYTES: usize = 8 * 1024;

const PREAMBLE: &str = "Tools run as sandboxed WebAssembly components; each one can reach only \
                        what its operator granted.";

/// The instructions for a caller who may use these plugins (name, summary), in order.
pub fn compose<'a>(plugins: impl Iterator<Item = (&'a str, Option<&'a str>)>) -> String {
    let mut text = String::from(PREAMBLE);
    let mut left_out = 0;
    for (name, summary) in plugins {
        let Some(summary) = summary.map(str::trim).filter(|s| !s.is_empty()) else {
            continue;
        };
        let entry = format!("\n\n{name}: {}", cut(summary, MAX_SUMMARY_BYTES));
        // Room is kept for the line that says how many were left out.
        if left_out > 0 || text.len() + entry.len() > MAX_INSTRUCTIONS_BYTES - 64 {
            left_out += 1;
            continue;
        }
        text.push_str(&entry);
    }
    if left_out > 0 {
        text.push_str(&format!(
            "\n\n({left_out} more plugins are described by their tools alone.)"
        ));
    }
    text
}

/// `text` cut to at most `max` bytes at a character boundary, marked with `…` when cut.
fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max - '…'.len_utf8();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", text[..end].trim_end())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries_follow_the_preamble_and_are_bounded() {
        let long = "é".repeat(4000);
        let text = compose(
            [
                ("fs", Some("Files under granted folders.")),
                ("quiet", None),
                ("long", Some(long.as_str())),
            ]
            .into_iter(),
        );
        assert!(text.starts_with(PREAMBLE), "{text}");
        assert!(
            text.contains("\n\nfs: Files under granted folders."),
            "{text}"
        );
        assert!(!text.contains("quiet"), "{text}");
        let long_entry = text.split("\n\nlong: ").nth(1).unwrap();
        assert!(long_entry.len() <= MAX_SUMMARY_BYTES && long_entry.ends_with('…'));
    }

    #[test]
    fn many_plugins_stop_at_the_limit_and_say_so() {
        let summary = "s".repeat(MAX_SUMMARY_BYTES);
        let names: Vec<String> = (0..20).map(|i| format!("p{i}")).collect();
        let text = compose(names.iter().map(|n| (n.as_str(), Some(summary.as_str()))));
        assert!(text.len() <= MAX_INSTRUCTIONS_BYTES, "{}", text.len());
        assert!(
            text.ends_with("more plugins are described by their tools alone.)"),
            "{text}"
        );
    }
}
