//! The `echo` plugin: its input, sent back.

moat_guest::generate!("echo");

struct Echo;

impl Guest for Echo {
    fn echo(message: String) -> String {
        message
    }

    fn repeat(message: String, times: u8, separator: Option<String>) -> String {
        vec![message; usize::from(times)].join(separator.as_deref().unwrap_or(""))
    }
}

export!(Echo);
