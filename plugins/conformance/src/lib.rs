//! The `conformance` plugin: the tools the official MCP conformance suite's server scenarios call,
//! answering as the suite's scenario descriptions ask.

use std::time::Duration;

moat_guest::generate!("conformance");

use moat::plugin::client::{
    ClientCapabilities, Form, Question, Sampling, SamplingMessage, ask, capabilities,
};
use moat::plugin::content::{Audio, Body, EmbeddedResource, Image};
use moat::plugin::log::{Level, log};
use moat::plugin::progress::report;
use moat::plugin::prompt::{Message, Role};
use moat::plugin::tasks::detach;
use serde_json::{Value, json};

/// A 1×1 red pixel.
const RED_PIXEL_PNG: [u8; 69] = [
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x02, 0x00, 0x00, 0x00, 0x90, 0x77, 0x53,
    0xde, 0x00, 0x00, 0x00, 0x0c, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0xf8, 0xcf, 0xc0, 0x00,
    0x00, 0x03, 0x01, 0x01, 0x00, 0xc9, 0xfe, 0x92, 0xef, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e,
    0x44, 0xae, 0x42, 0x60, 0x82,
];

/// The pause the suite asks for between notifications.
const PAUSE: Duration = Duration::from_millis(50);

struct Conformance;

impl Guest for Conformance {
    fn simple_text() -> ContentBlock {
        ContentBlock::Text("This is a simple text response for testing.".into())
    }

    fn image_content() -> ContentBlock {
        red_pixel()
    }

    fn audio_content() -> ContentBlock {
        ContentBlock::Audio(Audio {
            data: silent_wav(8000, 80),
            mime_type: "audio/wav".into(),
        })
    }

    fn tool_with_logging() -> String {
        log(Level::Info, "Tool execution started");
        std::thread::sleep(PAUSE);
        log(Level::Info, "Tool processing data");
        std::thread::sleep(PAUSE);
        log(Level::Info, "Tool execution completed");
        "Logged three messages.".into()
    }

    fn tool_with_progress() -> String {
        for (step, progress) in [0.0, 50.0, 100.0].into_iter().enumerate() {
            if step > 0 {
                std::thread::sleep(PAUSE);
            }
            report(progress, Some(100.0), None);
        }
        "Reported progress three times.".into()
    }

    fn logging_tool() -> String {
        log(Level::Info, "A message for clients that asked for logs");
        "Logged one message.".into()
    }

    fn error_handling() -> Result<String, String> {
        Err("This tool intentionally returns an error for testing".into())
    }

    fn embedded_resource() -> ContentBlock {
        embedded(
            "test://embedded-resource",
            "text/plain",
            "This is an embedded resource content.",
        )
    }

    fn multiple_content_types() -> Vec<ContentBlock> {
        vec![
            ContentBlock::Text("Multiple content types test:".into()),
            red_pixel(),
            embedded(
                "test://mixed-content-resource",
                "application/json",
                r#"{"test":"data","value":123}"#,
            ),
        ]
    }

    fn sampling(prompt: String) -> Result<String, String> {
        let answer = ask_one("sample", sample(&prompt, 100))?;
        Ok(format!("LLM response: {}", sampled_text(&answer)))
    }

    fn elicitation(message: String) -> Result<String, String> {
        let schema = json!({
            "type": "object",
            "properties": {
                "username": {"type": "string", "description": "User's response"},
                "email": {"type": "string", "description": "User's email address"},
            },
            "required": ["username", "email"],
        });
        let answer = ask_one("response", form(&message, schema))?;
        Ok(format!("User response: {answer}"))
    }

    fn elicitation_sep1034_defaults() -> Result<String, String> {
        let schema = json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "default": "John Doe"},
                "age": {"type": "integer", "default": 30},
                "score": {"type": "number", "default": 95.5},
                "status": {"type": "string", "enum": ["active", "inactive", "pending"], "default": "active"},
                "verified": {"type": "boolean", "default": true},
            },
        });
        let answer = ask_one("defaults", form("Please review your details", schema))?;
        Ok(completed(&answer))
    }

    fn elicitation_sep1330_enums() -> Result<String, String> {
        let titled = |prefix: &str, titles: [&str; 3]| -> Vec<Value> {
            (1..=3)
                .zip(titles)
                .map(|(i, title)| json!({"const": format!("{prefix}{i}"), "title": title}))
                .collect()
        };
        let schema = json!({
            "type": "object",
            "properties": {
                "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
                "titledSingle": {"type": "string", "oneOf": titled("value", ["First Option", "Second Option", "Third Option"])},
                "legacyEnum": {"type": "string", "enum": ["opt1", "opt2", "opt3"], "enumNames": ["Option One", "Option Two", "Option Three"]},
                "untitledMulti": {"type": "array", "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
                "titledMulti": {"type": "array", "items": {"anyOf": titled("value", ["First Choice", "Second Choice", "Third Choice"])}},
            },
        });
        let answer = ask_one("choices", form("Please choose", schema))?;
        Ok(completed(&answer))
    }

    fn input_required_result_elicitation() -> Result<String, String> {
        let answer = ask_one("user_name", name_form("What is your name?"))?;
        Ok(format!("Hello, {}!", field(&answer, "name")))
    }

    fn input_required_result_sampling() -> Result<String, String> {
        let answer = ask_one(
            "capital_question",
            sample("What is the capital of France?", 100),
        )?;
        Ok(format!("The model says: {}", sampled_text(&answer)))
    }

    fn input_required_result_list_roots() -> Result<String, String> {
        let answer = ask_one("client_roots", Question::Roots)?;
        Ok(format!("Your roots: {}", root_uris(&answer)))
    }

    fn input_required_result_request_state() -> Result<String, String> {
        let answer = ask_one("confirm", confirm_form())?;
        Ok(format!("state-ok: confirmed {}", answer["content"]["ok"]))
    }

    fn input_required_result_multiple_inputs() -> Result<String, String> {
        let answers = ask(&[
            ("user_name".into(), name_form("What is your name?")),
            ("greeting".into(), sample("Generate a greeting", 50)),
            ("client_roots".into(), Question::Roots),
        ])?;
        let answer = |key: &str| parse(&answers, key);
        Ok(format!(
            "{}, {}! Your roots: {}",
            sampled_text(&answer("greeting")),
            field(&answer("user_name"), "name"),
            root_uris(&answer("client_roots")),
        ))
    }

    fn input_required_result_multi_round() -> Result<String, String> {
        let name = ask_one("step1", name_form("Step 1: What is your name?"))?;
        let schema = json!({
            "type": "object",
            "properties": {"color": {"type": "string"}},
            "required": ["color"],
        });
        let color = ask_one(
            "step2",
            form("Step 2: What is your favorite color?", schema),
        )?;
        Ok(format!(
            "{} likes {}.",
            field(&name, "name"),
            field(&color, "color")
        ))
    }

    fn input_required_result_tampered_state() -> Result<String, String> {
        ask_one("confirm", confirm_form())?;
        Ok("Confirmed.".into())
    }

    fn input_required_result_capabilities() -> Result<String, String> {
        let declared = capabilities();
        let mut questions = Vec::new();
        if declared.contains(ClientCapabilities::ELICITATION) {
            questions.push(("user_name".into(), name_form("What is your name?")));
        }
        if declared.contains(ClientCapabilities::SAMPLING) {
            questions.push(("greeting".into(), sample("Generate a greeting", 50)));
        }
        if declared.contains(ClientCapabilities::ROOTS) {
            questions.push(("client_roots".into(), Question::Roots));
        }
        if questions.is_empty() {
            return Ok("The client can be asked nothing.".into());
        }
        let answers = ask(&questions)?;
        Ok(format!("Got {} answer(s).", answers.len()))
    }

    fn missing_capability() -> Result<String, String> {
        let answer = ask_one("needed", sample("Say something", 10))?;
        Ok(sampled_text(&answer))
    }

    fn json_schema_2020_12_tool(
        name: Option<String>,
        address: Option<Address>,
        shipping_address: Option<Address>,
        contact_method: Option<ContactMethod>,
        phone: Option<String>,
        email: Option<String>,
    ) -> String {
        let given = [
            name.is_some(),
            address.is_some(),
            shipping_address.is_some(),
            contact_method.is_some(),
            phone.is_some(),
            email.is_some(),
        ];
        format!("{} of 6 fields given", given.iter().filter(|g| **g).count())
    }

    fn greet(name: String) -> String {
        format!("Hello, {name}!")
    }

    fn slow_compute(seconds: u32, label: String) -> String {
        detach();
        std::thread::sleep(Duration::from_secs(seconds.into()));
        format!("Computed {label} in {seconds} s.")
    }

    fn failing_job() -> Result<String, String> {
        detach();
        Err("The job failed, as it always does.".into())
    }

    fn protocol_error_job() -> String {
        detach();
        panic!("the job crashed, as it always does");
    }

    fn confirm_delete(filename: String) -> Result<String, String> {
        detach();
        let schema = json!({
            "type": "object",
            "properties": {"confirm": {"type": "boolean"}},
            "required": ["confirm"],
        });
        let answer = ask_one("confirm", form(&format!("Delete {filename}?"), schema))?;
        match answer["content"]["confirm"] {
            Value::Bool(true) => Ok(format!("Deleted {filename}.")),
            _ => Ok(format!("Kept {filename}.")),
        }
    }

    fn multi_input() -> Result<String, String> {
        detach();
        let answers = ask(&[
            ("user_name".into(), name_form("What is your name?")),
            ("user_color".into(), {
                let schema = json!({
                    "type": "object",
                    "properties": {"color": {"type": "string"}},
                    "required": ["color"],
                });
                form("What is your favorite color?", schema)
            }),
        ])?;
        Ok(format!(
            "{} likes {}.",
            field(&parse(&answers, "user_name"), "name"),
            field(&parse(&answers, "user_color"), "color")
        ))
    }

    fn tool_with_task() -> Result<String, String> {
        let answer = ask_one("user_name", name_form("What is your name?"))?;
        detach();
        Ok(format!("Hello from the task, {}!", field(&answer, "name")))
    }

    fn custom_headers(region: String) -> String {
        format!("Region: {region}")
    }

    fn streaming_elicitation() -> Result<String, String> {
        log(Level::Info, "About to ask for a name");
        let answer = ask_one("user_name", name_form("What is your name?"))?;
        Ok(format!("Hello, {}!", field(&answer, "name")))
    }
}

impl exports::prompts::Guest for Conformance {
    fn simple_prompt() -> Vec<Message> {
        vec![user(ContentBlock::Text(
            "This is a simple prompt for testing.".into(),
        ))]
    }

    fn prompt_with_arguments(arg1: String, arg2: String) -> Vec<Message> {
        vec![user(ContentBlock::Text(format!(
            "Prompt with arguments: arg1='{arg1}', arg2='{arg2}'"
        )))]
    }

    fn prompt_with_embedded_resource(resource_uri: String) -> Vec<Message> {
        vec![
            user(embedded(
                &resource_uri,
                "text/plain",
                "Embedded resource content for testing.",
            )),
            user(ContentBlock::Text(
                "Please process the embedded resource above.".into(),
            )),
        ]
    }

    fn prompt_with_image() -> Vec<Message> {
        vec![
            user(red_pixel()),
            user(ContentBlock::Text("Please analyze the image above.".into())),
        ]
    }

    fn input_required_result_prompt() -> Result<Vec<Message>, String> {
        let schema = json!({
            "type": "object",
            "properties": {"context": {"type": "string"}},
            "required": ["context"],
        });
        let answer = ask_one(
            "user_context",
            form("What context should the prompt use?", schema),
        )?;
        Ok(vec![user(ContentBlock::Text(format!(
            "Use this context: {}",
            field(&answer, "context")
        )))])
    }
}

impl exports::resources::Guest for Conformance {
    fn static_text() -> String {
        "This is the content of the static text resource.".into()
    }

    fn static_binary() -> Vec<u8> {
        RED_PIXEL_PNG.to_vec()
    }

    fn template_data(id: String) -> String {
        json!({"id": id, "templateTest": true, "data": format!("Data for ID: {id}")}).to_string()
    }

    fn watched_resource() -> String {
        moat::plugin::resources::updated("watched-resource");
        "This resource is watched for changes.".into()
    }
}

impl exports::completions::Guest for Conformance {
    fn complete_prompt(_prompt: String, _argument: String, value: String) -> Vec<String> {
        ["test", "testing", "tested"]
            .into_iter()
            .filter(|s| s.starts_with(&value))
            .map(String::from)
            .collect()
    }

    fn complete_resource(_template: String, _variable: String, value: String) -> Vec<String> {
        ["123", "456"]
            .into_iter()
            .filter(|s| s.starts_with(&value))
            .map(String::from)
            .collect()
    }
}

fn user(content: ContentBlock) -> Message {
    Message {
        role: Role::User,
        content,
    }
}

fn red_pixel() -> ContentBlock {
    ContentBlock::Image(Image {
        data: RED_PIXEL_PNG.to_vec(),
        mime_type: "image/png".into(),
    })
}

fn embedded(uri: &str, mime_type: &str, text: &str) -> ContentBlock {
    ContentBlock::Resource(EmbeddedResource {
        uri: uri.into(),
        mime_type: Some(mime_type.into()),
        body: Body::Text(text.into()),
    })
}

fn form(message: &str, schema: Value) -> Question {
    Question::Elicit(Form {
        message: message.into(),
        schema: schema.to_string(),
    })
}

fn name_form(message: &str) -> Question {
    let schema = json!({
        "type": "object",
        "properties": {"name": {"type": "string"}},
        "required": ["name"],
    });
    form(message, schema)
}

fn confirm_form() -> Question {
    let schema = json!({
        "type": "object",
        "properties": {"ok": {"type": "boolean"}},
        "required": ["ok"],
    });
    form("Please confirm", schema)
}

fn sample(text: &str, max_tokens: u32) -> Question {
    Question::Sample(Sampling {
        messages: vec![SamplingMessage {
            role: Role::User,
            content: ContentBlock::Text(text.into()),
        }],
        system_prompt: None,
        max_tokens,
    })
}

/// Asks one question and parses its answer.
fn ask_one(key: &str, question: Question) -> Result<Value, String> {
    let answers = ask(&[(key.to_string(), question)])?;
    Ok(parse(&answers, key))
}

fn parse(answers: &[(String, String)], key: &str) -> Value {
    answers
        .iter()
        .find(|(k, _)| k == key)
        .and_then(|(_, answer)| serde_json::from_str(answer).ok())
        .unwrap_or(Value::Null)
}

/// A form field of an accepted elicitation, as text.
fn field(answer: &Value, name: &str) -> String {
    match &answer["content"][name] {
        Value::String(text) => text.clone(),
        Value::Null => format!("(no {name})"),
        other => other.to_string(),
    }
}

fn completed(answer: &Value) -> String {
    format!(
        "Elicitation completed: action={}, content={}",
        answer["action"].as_str().unwrap_or("unknown"),
        answer["content"]
    )
}

fn sampled_text(answer: &Value) -> String {
    answer["content"]["text"].as_str().unwrap_or("").to_string()
}

fn root_uris(answer: &Value) -> String {
    let uris: Vec<&str> = answer["roots"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|root| root["uri"].as_str())
        .collect();
    uris.join(", ")
}

/// A mono 8-bit PCM WAV file of `samples` samples of silence at `rate` Hz.
fn silent_wav(rate: u32, samples: u32) -> Vec<u8> {
    let mut wav = Vec::with_capacity(44 + samples as usize);
    wav.extend_from_slice(b"RIFF");
    wav.extend_from_slice(&(36 + samples).to_le_bytes());
    wav.extend_from_slice(b"WAVEfmt ");
    wav.extend_from_slice(&16u32.to_le_bytes()); // size of the format chunk
    wav.extend_from_slice(&1u16.to_le_bytes()); // PCM
    wav.extend_from_slice(&1u16.to_le_bytes()); // mono
    wav.extend_from_slice(&rate.to_le_bytes());
    wav.extend_from_slice(&rate.to_le_bytes()); // bytes per second
    wav.extend_from_slice(&1u16.to_le_bytes()); // bytes per frame
    wav.extend_from_slice(&8u16.to_le_bytes()); // bits per sample
    wav.extend_from_slice(b"data");
    wav.extend_from_slice(&samples.to_le_bytes());
    wav.resize(44 + samples as usize, 0x80); // 8-bit PCM is unsigned: 0x80 is silence
    wav
}

export!(Conformance);
