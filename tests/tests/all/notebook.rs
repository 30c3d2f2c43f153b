//! The `notebook` plugin, through moat's plugin API: prompts, resources and completions found
//! in its WIT, each served by a fresh instance, and a delete that asks the client first,
//! answered here by a client of the test's own.

use std::sync::{Arc, Mutex};

use moat::plugin::completions::Completing;
use moat::plugin::prompts::Got;
use moat::plugin::resources::Read;
use moat::plugin::{CallError, Exchange, Plugin};
use moat::sandbox::host::{Answers, AskError, Client, Declared, InputRequired, Question};
use moat_tests::plugins;
use serde_json::{Value, json};

use crate::filesystem::Fixture;

fn notebook(fixture: &Fixture) -> Arc<Plugin> {
    std::fs::write(fixture.root.join("rw/first.md"), "# First\n").unwrap();
    fixture.load(
        "notebook",
        plugins::NOTEBOOK,
        r#"{ host = "rw", guest = "/notes", mode = "rw" }"#,
        "",
    )
}

/// A client that answers every question with `answer`, and keeps the questions.
pub(crate) struct Answering {
    answer: Option<Value>,
    pub(crate) asked: Mutex<Vec<Question>>,
}

impl Client for Answering {
    fn declared(&self) -> Declared {
        Declared {
            elicitation: true,
            ..Declared::default()
        }
    }

    fn ask(
        self: Arc<Self>,
        questions: Vec<Question>,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<Answers, AskError>> + Send>> {
        self.asked.lock().unwrap().extend(questions.clone());
        let answers = match &self.answer {
            Some(answer) => Ok(questions
                .into_iter()
                .map(|q| (q.key, answer.clone()))
                .collect()),
            None => Err(AskError::InputRequired(InputRequired(questions))),
        };
        Box::pin(std::future::ready(answers))
    }
}

pub(crate) fn answering(answer: Option<Value>) -> Arc<Answering> {
    Arc::new(Answering {
        answer,
        asked: Mutex::default(),
    })
}

async fn delete(notebook: &Plugin, client: Option<Arc<Answering>>) -> Result<String, CallError> {
    let tool = notebook
        .tools
        .iter()
        .find(|t| t.name == "notebook_delete_note")
        .unwrap();
    let exchange = Exchange {
        events: None,
        client: client.map(|c| c as Arc<dyn Client>),
        credentials: None,
        reach: None,
    };
    let outcome = notebook
        .call_asking(tool, json!({"name": "first"}).as_object(), exchange)
        .await;
    outcome
        .result
        .map(|result| moat_tests::text(&result).to_string())
}

#[tokio::test]
async fn prompts_resources_and_completions_come_from_the_wit() {
    let fixture = Fixture::new("notebook-offers");
    let notebook = notebook(&fixture);
    let tools: Vec<&str> = notebook.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        tools,
        [
            "notebook_delete_note",
            "notebook_list_notes",
            "notebook_write_note"
        ]
    );

    let [prompt] = &notebook.prompts[..] else {
        panic!("one prompt")
    };
    assert_eq!(prompt.name, "notebook_summarize");
    assert_eq!(
        prompt.description.as_deref(),
        Some("Asks the model to summarize a note.")
    );
    let arguments: Vec<(&str, bool)> = prompt
        .arguments
        .iter()
        .map(|a| (a.name.as_str(), a.required))
        .collect();
    assert_eq!(arguments, [("name", true)]);

    let resources: Vec<(String, Option<&str>, bool)> = notebook
        .resources
        .iter()
        .map(|r| {
            (
                r.template.to_string(),
                r.mime_type.as_deref(),
                r.is_template(),
            )
        })
        .collect();
    assert_eq!(
        resources,
        [
            ("index".to_string(), Some("text/plain"), false),
            ("notes/{name}".to_string(), Some("text/markdown"), true),
        ]
    );
    assert_eq!(&*notebook.scheme, "notebook");

    let (suggestions, more) = notebook
        .complete(Completing::Prompt("summarize"), "name", "fi")
        .await
        .unwrap();
    assert_eq!((suggestions, more), (vec!["first".to_string()], false));
}

#[tokio::test]
async fn a_read_runs_the_resource_with_its_uri_variables() {
    let fixture = Fixture::new("notebook-read");
    let notebook = notebook(&fixture);
    let (resource, variables) = notebook.find_resource("notes/first").unwrap();
    assert_eq!(variables, [("name".to_string(), "first".to_string())]);
    let uri = "notebook://notes/first";
    let Read::Contents(contents) = notebook
        .read_resource(resource, uri, &variables, Exchange::default())
        .await
        .unwrap()
    else {
        panic!("the note is there");
    };
    assert_eq!(
        serde_json::to_value(contents).unwrap(),
        json!({"uri": uri, "mimeType": "text/markdown", "text": "# First\n"})
    );

    // The guest's `err` says there is no such resource; a name the guest refuses does too.
    let (resource, variables) = notebook.find_resource("notes/absent").unwrap();
    let read = notebook
        .read_resource(
            resource,
            "notebook://notes/absent",
            &variables,
            Exchange::default(),
        )
        .await
        .unwrap();
    assert!(matches!(read, Read::NotFound(why) if why.contains("no note \"absent\"")));
    // Variables never hold `/`, so no URI reaches outside the folder through a template.
    assert!(notebook.find_resource("notes/../secret").is_none());
    assert!(notebook.find_resource("notes/%2E%2E%2Fsecret").is_some());
    let (resource, variables) = notebook.find_resource("notes/%2E%2E%2Fsecret").unwrap();
    let read = notebook
        .read_resource(
            resource,
            "notebook://notes/%2E%2E%2Fsecret",
            &variables,
            Exchange::default(),
        )
        .await
        .unwrap();
    assert!(matches!(read, Read::NotFound(why) if why.contains("not \"../secret\"")));
}

#[tokio::test]
async fn a_prompt_embeds_its_note() {
    let fixture = Fixture::new("notebook-prompt");
    let notebook = notebook(&fixture);
    let prompt = &notebook.prompts[0];
    let Got::Messages(messages) = notebook
        .get_prompt(
            prompt,
            json!({"name": "first"}).as_object(),
            Exchange::default(),
        )
        .await
        .unwrap()
    else {
        panic!("the note is there");
    };
    let messages = serde_json::to_value(messages).unwrap();
    assert_eq!(messages[0]["content"]["type"], "resource");
    assert_eq!(
        messages[0]["content"]["resource"]["uri"],
        "notebook://notes/first"
    );
    assert_eq!(messages[0]["content"]["resource"]["text"], "# First\n");
    assert_eq!(messages[1]["role"], "user");

    let missing = notebook
        .get_prompt(prompt, json!({}).as_object(), Exchange::default())
        .await;
    assert!(matches!(missing, Err(CallError::InvalidArguments(_))));
}

#[tokio::test]
async fn a_delete_asks_first_and_acts_only_on_a_yes() {
    let fixture = Fixture::new("notebook-delete");
    let notebook = notebook(&fixture);
    let note = fixture.root.join("rw/first.md");

    // Nobody to ask: the guest hears so, and keeps the note.
    let refused = delete(&notebook, None).await.unwrap();
    assert!(
        refused.contains("cannot ask the client anything"),
        "{refused}"
    );
    assert!(note.exists());

    let no = answering(Some(json!({"action": "decline"})));
    assert_eq!(
        delete(&notebook, Some(no.clone())).await.unwrap(),
        "Kept note \"first\"."
    );
    let asked = no.asked.lock().unwrap().clone();
    let [question] = &asked[..] else {
        panic!("one question")
    };
    assert_eq!(
        (question.key.as_str(), question.method.as_str()),
        ("confirm", "elicitation/create")
    );
    assert_eq!(question.params["message"], "Delete the note \"first\"?");
    assert_eq!(
        question.params["requestedSchema"]["properties"]["confirm"]["type"],
        "boolean"
    );
    assert!(note.exists());

    // The form is the plugin's `forms.confirm-delete`, its schema from the WIT; an answer
    // that does not fit its types never reaches the guest.
    assert_eq!(
        question.params["requestedSchema"],
        json!({
            "type": "object",
            "properties": {"confirm": {"type": "boolean", "description": "delete the note for good"}},
            "required": ["confirm"],
            "additionalProperties": false,
        })
    );
    let odd = answering(Some(
        json!({"action": "accept", "content": {"confirm": "yes"}}),
    ));
    let refused = delete(&notebook, Some(odd)).await.unwrap();
    assert!(refused.contains("does not fit its form"), "{refused}");
    assert!(note.exists());

    // A later answer: the call stops with the question, having changed nothing.
    let later = delete(&notebook, Some(answering(None))).await.unwrap_err();
    assert!(matches!(&later, CallError::InputRequired(q) if q[0].key == "confirm"));
    assert!(note.exists());

    let yes = answering(Some(
        json!({"action": "accept", "content": {"confirm": true}}),
    ));
    assert_eq!(
        delete(&notebook, Some(yes)).await.unwrap(),
        "Deleted note \"first\"."
    );
    assert!(!note.exists());
}
