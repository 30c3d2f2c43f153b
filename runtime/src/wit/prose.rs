//! Doc comments as the prose they are. An author wraps a `///` comment at the editor's width; a
//! model reads the text, and a host shows it, as Markdown would: the lines of one paragraph are
//! one line, and what Markdown keeps apart stays apart.

/// `text` with each paragraph's wrapped lines joined by a space. Kept as written: the gap between
/// paragraphs (one blank line), list items (`- `, `* `, `+ `, `1. `, `1) `, nested ones with their
/// indentation), headings, quotes, table rows and rules (each on a line of its own), fenced code
/// (```` ``` ```` or `~~~`), code indented by four columns after a blank line, and a break the
/// author forced with a trailing `\`.
pub fn reflow(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut block = Block::Start;
    let mut blank = false;
    for line in text.lines().map(str::trim_end) {
        if let Block::Fence(marker, length) = block {
            out.push('\n');
            out.push_str(line);
            if closes_fence(line, marker, length) {
                block = Block::Own;
            }
            continue;
        }
        if line.is_empty() {
            blank = !out.is_empty();
            continue;
        }
        let indent = columns(line);
        let body = line.trim_start();
        let gap = match (out.is_empty(), blank) {
            (true, _) => "",
            (false, true) => "\n\n",
            (false, false) => "\n",
        };
        let after_break = blank || matches!(block, Block::Start | Block::Own | Block::Code);
        let hard_break = out.ends_with('\\');
        blank = false;
        let (kept, next) = if let Some((marker, length)) = opens_fence(body).filter(|_| indent < 4)
        {
            (line, Block::Fence(marker, length))
        } else if indent >= 4 && (after_break || block == Block::Code) {
            // Under a list item, an indented item is a nested one, not code.
            match list_item(body) {
                Some(_) if block == Block::Item => (line, Block::Item),
                _ => (line, Block::Code),
            }
        } else if let Some(number) = list_item(body) {
            // Only a list's first number may interrupt a paragraph: a wrapped line that happens
            // to start with "2024. " is prose (CommonMark's rule).
            let interrupts = number.is_none_or(|n| n == 1) || block != Block::Paragraph;
            if interrupts {
                (line, Block::Item)
            } else {
                (body, Block::Paragraph)
            }
        } else if own_line(body) && indent < 4 {
            (body, Block::Own)
        } else {
            (body, Block::Paragraph)
        };
        let continues = !after_break
            && next == Block::Paragraph
            && matches!(block, Block::Paragraph | Block::Item);
        if continues {
            out.push(if hard_break { '\n' } else { ' ' });
            out.push_str(body);
            continue;
        }
        out.push_str(gap);
        out.push_str(kept);
        block = match next {
            // A quote's next lines continue it, as a paragraph's do.
            Block::Own if body.starts_with('>') => Block::Paragraph,
            next => next,
        };
    }
    out
}

/// The start of `text` that fits in `width` characters, for a list of one line each: its first
/// sentence when that fits (a whole sentence reads as complete), else as many whole words as fit,
/// followed by `…`.
pub fn headline(text: &str, width: usize) -> String {
    let line = text.lines().next().unwrap_or_default().trim();
    let first = first_sentence(line);
    if first.chars().count() <= width {
        return first.to_string();
    }
    // Room for the `…`; a word longer than the width is cut inside it.
    let room = width.saturating_sub(1);
    let end = line
        .char_indices()
        .nth(room)
        .map_or(line.len(), |(at, _)| at);
    let words = line[..end]
        .rfind(' ')
        .filter(|_| !line[end..].starts_with(' '))
        .map_or(end, |space| space);
    format!("{}…", line[..words].trim_end())
}

/// The first sentence of `line`: up to the first `.`, `!` or `?` that a space follows (not the
/// one of `e.g.` or `i.e.`), or the whole line.
fn first_sentence(line: &str) -> &str {
    let mut from = 0;
    while let Some(at) = line[from..].find(['.', '!', '?']).map(|at| from + at) {
        let end = at + 1;
        let abbreviation = line[..end].ends_with("e.g.") || line[..end].ends_with("i.e.");
        if line[end..].starts_with(' ') && !abbreviation {
            return &line[..end];
        }
        from = end;
    }
    line
}

/// What the line before was part of.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Block {
    /// Nothing yet.
    Start,
    Paragraph,
    /// A list item, which the lines after it continue until a blank line.
    Item,
    /// Indented code.
    Code,
    /// Fenced code, with its fence's character and length.
    Fence(char, usize),
    /// A heading, table row or rule: a block of one line.
    Own,
}

/// The line's indentation in columns, a tab reaching the next multiple of four.
fn columns(line: &str) -> usize {
    let mut width = 0;
    for c in line.chars() {
        match c {
            ' ' => width += 1,
            '\t' => width += 4 - width % 4,
            _ => break,
        }
    }
    width
}

/// The fence a line opens: three or more backticks or tildes.
fn opens_fence(body: &str) -> Option<(char, usize)> {
    let marker = body.chars().next().filter(|c| matches!(c, '`' | '~'))?;
    let length = body.chars().take_while(|&c| c == marker).count();
    (length >= 3).then_some((marker, length))
}

/// Whether `line` closes a fence of `length` `marker`s: at least as many, and nothing else.
fn closes_fence(line: &str, marker: char, length: usize) -> bool {
    let body = line.trim();
    columns(line) < 4 && body.len() >= length && body.chars().all(|c| c == marker)
}

/// `Some(None)` for a bullet item, `Some(Some(n))` for an item numbered `n`, `None` for any
/// other line.
fn list_item(body: &str) -> Option<Option<u64>> {
    let marked = |rest: &str| rest.is_empty() || rest.starts_with([' ', '\t']);
    if let Some(rest) = body.strip_prefix(['-', '*', '+']) {
        return marked(rest).then_some(None);
    }
    let digits = body.bytes().take_while(u8::is_ascii_digit).count();
    let rest = body[digits..].strip_prefix(['.', ')'])?;
    let number = body[..digits].parse().ok().filter(|_| digits <= 9)?;
    marked(rest).then_some(Some(number))
}

/// Whether `line`, after a paragraph's line, continues that paragraph: it is not blank and starts
/// no block of its own (a list item, fence, heading, table row, rule or quote).
pub fn continues_paragraph(line: &str) -> bool {
    let body = line.trim();
    let numbered_on = matches!(list_item(body), Some(Some(n)) if n != 1);
    !body.is_empty()
        && (list_item(body).is_none() || numbered_on)
        && opens_fence(body).is_none()
        && !own_line(body)
}

/// Headings, table rows and rules (`---`, `***`, `___`, or `===` under a heading): each is a
/// line of its own, which neither continues the line before nor is continued.
fn own_line(body: &str) -> bool {
    let heading = body
        .strip_prefix('#')
        .map(|rest| rest.trim_start_matches('#'))
        .is_some_and(|rest| {
            body.len() - rest.len() <= 6 && (rest.is_empty() || rest.starts_with(' '))
        });
    let rule = body.len() >= 3
        && ['-', '*', '_', '=']
            .iter()
            .any(|&c| body.chars().all(|b| b == c || b == ' ') && body.starts_with(c));
    heading || rule || body.starts_with(['|', '>'])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrapped_lines_become_one_paragraph_and_paragraphs_stay_apart() {
        assert_eq!(
            reflow(
                "Hashes the text. Use it\nwhenever a digest is needed.\n\n\nFails on\n  nothing."
            ),
            "Hashes the text. Use it whenever a digest is needed.\n\nFails on nothing."
        );
    }

    #[test]
    fn list_items_start_their_own_lines_and_their_wrapped_lines_join_them() {
        assert_eq!(
            reflow(
                "Modes:\n- `rw`: read and\n  write\n* `ro`: read\n  - nested\n1. one\n2) two\n+ plus"
            ),
            "Modes:\n- `rw`: read and write\n* `ro`: read\n  - nested\n1. one\n2) two\n+ plus"
        );
    }

    #[test]
    fn a_number_that_wraps_to_the_start_of_a_line_is_prose() {
        assert_eq!(
            reflow("Released in\n2024. Then\nrenamed."),
            "Released in 2024. Then renamed."
        );
        assert_eq!(
            reflow("Steps:\n1. fetch\n2. parse"),
            "Steps:\n1. fetch\n2. parse"
        );
        // A dash needs a space after it to be a bullet.
        assert_eq!(reflow("a\n-1 is\nfine"), "a -1 is fine");
    }

    #[test]
    fn code_is_kept_as_written() {
        let fenced = "Example:\n```json\n{\"a\":\n  1}\n\n```\nAfter\nit.";
        assert_eq!(
            reflow(fenced),
            "Example:\n```json\n{\"a\":\n  1}\n\n```\nAfter it."
        );
        let indented = "Example:\n\n    let a =\n        1;\n\tb\nAfter\nit.";
        assert_eq!(
            reflow(indented),
            "Example:\n\n    let a =\n        1;\n\tb\nAfter it."
        );
        // Indented after a paragraph's line, a line continues it (Markdown's lazy continuation).
        assert_eq!(reflow("one\n     two"), "one two");
    }

    #[test]
    fn headings_tables_rules_quotes_and_forced_breaks_keep_their_lines() {
        assert_eq!(
            reflow("# Title\nText\nmore.\n| a | b |\n|---|---|\n---\n> quoted\nand on\n#hashtag"),
            "# Title\nText more.\n| a | b |\n|---|---|\n---\n> quoted and on #hashtag"
        );
        assert_eq!(reflow("first\\\nsecond\nthird"), "first\\\nsecond third");
    }

    #[test]
    fn a_headline_is_the_first_sentence_or_whole_words_and_an_ellipsis() {
        let text = "Hashes the text. Use it whenever a digest is needed.\n\nMore.";
        assert_eq!(headline(text, 40), "Hashes the text.");
        assert_eq!(headline("Short, no stop", 40), "Short, no stop");
        // e.g. does not end a sentence.
        assert_eq!(
            headline("Moves it (e.g. a file). Then more.", 40),
            "Moves it (e.g. a file)."
        );
        // A sentence longer than the width stops at a word boundary.
        let long = "The current weather at a place: temperature, humidity and wind. Use it now.";
        assert_eq!(headline(long, 40), "The current weather at a place:…");
        assert!(headline(long, 40).chars().count() <= 40);
        // A cut that falls just before a space keeps the whole word before it.
        assert_eq!(headline("abcd efgh ijkl", 10), "abcd efgh…");
        assert_eq!(headline("abcdefghijkl mn", 6), "abcde…");
        assert_eq!(headline("é".repeat(50).as_str(), 10).chars().count(), 10);
        assert_eq!(headline("", 10), "");
    }

    #[test]
    fn leading_and_trailing_blank_lines_go_and_an_empty_text_stays_empty() {
        assert_eq!(reflow("\n\n  a\nb  \n\n"), "a b");
        assert_eq!(reflow(""), "");
        assert_eq!(reflow("\n \n"), "");
    }
}
