//! The `notebook` plugin: notes in `/notes`, read as resources, summarized by a prompt, and
//! deleted only once the user confirms, through an elicitation.
//!
//! A call that asks the client may run more than once (a 2026-07-28 client answers in a new
//! request, and moat replays the call with the answers): `delete-note` asks before it changes
//! anything, and asks the same question each time.

use std::fs;
use std::path::PathBuf;

moat_guest::generate!("notebook");

use moat::plugin::client::{Question, TypedForm, ask};
use moat::plugin::content::{Body, ContentBlock, EmbeddedResource};
use moat::plugin::prompt::{Message, Role};
use serde_json::Value;

/// Where the operator grants the notes' folder.
const FOLDER: &str = "/notes";

struct Notebook;

impl Guest for Notebook {
    fn list_notes() -> Result<Vec<String>, String> {
        names()
    }

    fn write_note(name: String, text: String) -> Result<String, String> {
        let path = path_of(&name)?;
        fs::write(&path, text).map_err(|e| format!("cannot write note \"{name}\": {e}"))?;
        moat::plugin::resources::updated(&format!("notes/{name}"));
        moat::plugin::resources::updated("index");
        Ok(format!("Saved note \"{name}\"."))
    }

    fn delete_note(name: String) -> Result<String, String> {
        let path = path_of(&name)?;
        if !path.exists() {
            return Err(format!("there is no note \"{name}\""));
        }
        // A form declared in the WIT (`forms.confirm-delete`): moat writes its schema and
        // checks the answer's types.
        let question = Question::ElicitTyped(TypedForm {
            name: "confirm-delete".into(),
            message: format!("Delete the note \"{name}\"?"),
        });
        let answers = ask(&[("confirm".to_string(), question)])?;
        let answer: Value = answers
            .first()
            .and_then(|(_, answer)| serde_json::from_str(answer).ok())
            .unwrap_or(Value::Null);
        let confirmed = answer["action"] == "accept" && answer["content"]["confirm"] == true;
        if !confirmed {
            return Ok(format!("Kept note \"{name}\"."));
        }
        fs::remove_file(&path).map_err(|e| format!("cannot delete note \"{name}\": {e}"))?;
        moat::plugin::resources::updated("index");
        Ok(format!("Deleted note \"{name}\"."))
    }
}

impl exports::prompts::Guest for Notebook {
    fn summarize(name: String) -> Result<Vec<Message>, String> {
        let text = read(&name)?;
        let note = ContentBlock::Resource(EmbeddedResource {
            uri: format!("notebook://notes/{name}"),
            mime_type: Some("text/markdown".into()),
            body: Body::Text(text),
        });
        let ask = ContentBlock::Text("Summarize the note above in three sentences.".into());
        Ok(vec![user(note), user(ask)])
    }
}

impl exports::resources::Guest for Notebook {
    fn note(name: String) -> Result<String, String> {
        read(&name)
    }

    fn index() -> Result<String, String> {
        Ok(names()?.join("\n"))
    }
}

impl exports::forms::Guest for Notebook {
    fn confirm_delete(_confirm: bool) {}
}

impl exports::completions::Guest for Notebook {
    fn complete_prompt(_prompt: String, _argument: String, value: String) -> Vec<String> {
        starting_with(&value)
    }

    fn complete_resource(_template: String, _variable: String, value: String) -> Vec<String> {
        starting_with(&value)
    }
}

fn user(content: ContentBlock) -> Message {
    Message {
        role: Role::User,
        content,
    }
}

fn starting_with(prefix: &str) -> Vec<String> {
    names()
        .unwrap_or_default()
        .into_iter()
        .filter(|name| name.starts_with(prefix))
        .collect()
}

/// The notes' names: the `.md` files of the folder, sorted.
fn names() -> Result<Vec<String>, String> {
    let entries = fs::read_dir(FOLDER).map_err(|e| format!("cannot read {FOLDER}: {e}"))?;
    let mut names: Vec<String> = entries
        .filter_map(|entry| entry.ok())
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            name.strip_suffix(".md").map(str::to_string)
        })
        .collect();
    names.sort();
    Ok(names)
}

fn read(name: &str) -> Result<String, String> {
    fs::read_to_string(path_of(name)?).map_err(|_| format!("there is no note \"{name}\""))
}

/// The file of note `name`; a name that could leave the folder is refused.
fn path_of(name: &str) -> Result<PathBuf, String> {
    let valid = !name.is_empty()
        && name.len() <= 100
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !valid {
        return Err(format!(
            "a note's name is 1 to 100 letters, digits, `-` and `_`, not \"{name}\""
        ));
    }
    Ok(PathBuf::from(FOLDER).join(format!("{name}.md")))
}

export!(Notebook);
