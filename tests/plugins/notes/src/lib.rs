//! The `notes` test plugin: uses exactly what its manifest asks for (a folder, a variable).

moat_guest::generate!("notes");

struct Notes;

impl Guest for Notes {
    fn read_note(name: String) -> Result<String, String> {
        std::fs::read_to_string(format!("/notes/{name}")).map_err(|e| e.to_string())
    }

    fn write_note(name: String, text: String) -> Result<(), String> {
        std::fs::write(format!("/notes/{name}"), text).map_err(|e| e.to_string())
    }

    fn title() -> Option<String> {
        std::env::var("NOTES_TITLE").ok()
    }
}

export!(Notes);
