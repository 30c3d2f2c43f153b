//! The client's side of a guest's questions (`moat:plugin/client.ask`): elicitation, sampling
//! and roots, the way the request's protocol era allows.
//!
//! * A legacy session (one that began with `initialize`) gets each question as a request on its
//!   own connection, and the guest waits for the answers ([`Session`]).
//! * A 2026-07-28 request cannot be sent requests: the call stops with `input_required`, and the
//!   client calls again with `inputResponses` and the `requestState` moat handed out. The state
//!   holds every round answered so far, sealed (see [`crate::mcp::request_state`]); the guest
//!   runs again from the start in a fresh instance and each `ask` gets its round's answers back
//!   ([`Rounds`]), until one asks something new.

use std::pin::Pin;
use std::sync::{Arc, Mutex};

use rmcp::RoleServer;
use rmcp::model::{ClientCapabilities, InputRequest, InputRequests, InputResponses, ServerRequest};
use rmcp::service::Peer;
use serde_json::Value;

use crate::sandbox::host::{
    Answers, AskError, Client, Declared, Detach, InputRequired, MissingCapability, Question,
};

/// The answers of one round, in the order asked.
pub type Round = Vec<(String, Value)>;

type Asked = Pin<Box<dyn Future<Output = Result<Answers, AskError>> + Send>>;

/// The capability a client must declare for a question, in `ClientCapabilities` terms.
fn needed(question: &Question) -> &'static str {
    match question.method.as_str() {
        "sampling/createMessage" => "sampling",
        "roots/list" => "roots",
        _ => "elicitation",
    }
}

fn declares(capabilities: &ClientCapabilities, capability: &str) -> bool {
    match capability {
        "sampling" => capabilities.sampling.is_some(),
        "roots" => capabilities.roots.is_some(),
        _ => capabilities.elicitation.is_some(),
    }
}

/// Whether `answer` has the shape of an answer to `question`; one that has not is asked again.
fn answers(question: &Question, answer: &Value) -> bool {
    match question.method.as_str() {
        "sampling/createMessage" => answer.get("content").is_some_and(Value::is_object),
        "roots/list" => answer.get("roots").is_some_and(Value::is_array),
        _ => answer.get("action").is_some_and(Value::is_string),
    }
}

/// A question as rmcp's request.
fn input_request(question: &Question) -> Result<InputRequest, String> {
    let request = serde_json::json!({"method": question.method, "params": question.params});
    serde_json::from_value(request).map_err(|e| {
        format!(
            "question \"{}\" is not a valid {}: {e}",
            question.key, question.method
        )
    })
}

/// The questions as the `inputRequests` of an `input_required` result.
pub fn input_requests(questions: &[Question]) -> Result<InputRequests, String> {
    questions
        .iter()
        .map(|q| Ok((q.key.clone(), input_request(q)?)))
        .collect()
}

/// Asks a legacy session's client on its connection.
pub struct Session {
    pub peer: Peer<RoleServer>,
    pub capabilities: ClientCapabilities,
}

/// What `detach` does for a request from a client that declared `capabilities`.
fn detach_for(capabilities: &ClientCapabilities) -> Detach {
    if capabilities.supports_tasks() {
        Detach::Now
    } else {
        Detach::Unsupported
    }
}

/// What `capabilities` declares, as the guest sees it.
fn declared(capabilities: &ClientCapabilities) -> Declared {
    Declared {
        elicitation: capabilities.elicitation.is_some(),
        sampling: capabilities.sampling.is_some(),
        roots: capabilities.roots.is_some(),
    }
}

impl Client for Session {
    fn declared(&self) -> Declared {
        declared(&self.capabilities)
    }

    fn detach(&self) -> Detach {
        detach_for(&self.capabilities)
    }

    fn ask(self: Arc<Self>, questions: Vec<Question>) -> Asked {
        Box::pin(async move {
            let mut answers = Vec::with_capacity(questions.len());
            for question in &questions {
                let capability = needed(question);
                if !declares(&self.capabilities, capability) {
                    return Err(AskError::Refused(format!(
                        "the client did not declare the `{capability}` capability"
                    )));
                }
                let request = match input_request(question).map_err(AskError::Refused)? {
                    InputRequest::CreateMessage(r) => ServerRequest::CreateMessageRequest(r),
                    InputRequest::Elicitation(r) => ServerRequest::ElicitRequest(r),
                    InputRequest::ListRoots(r) => ServerRequest::ListRootsRequest(r),
                    _ => return Err(AskError::Refused("an unknown kind of question".into())),
                };
                let answer = self.peer.send_request(request).await.map_err(|e| {
                    AskError::Refused(format!(
                        "the client did not answer \"{}\": {e}",
                        question.key
                    ))
                })?;
                let answer = serde_json::to_value(answer)
                    .map_err(|e| AskError::Refused(format!("an unreadable answer: {e}")))?;
                answers.push((question.key.clone(), answer));
            }
            Ok(answers)
        })
    }
}

/// Answers a replayed 2026-07-28 call from the rounds its client answered so far.
pub struct Rounds {
    capabilities: ClientCapabilities,
    /// This request's `inputResponses`: the answers to the round asked last.
    responses: InputResponses,
    state: Mutex<Replay>,
    detach: Detach,
}

struct Replay {
    answered: Vec<Round>,
    /// The `ask` the guest is at.
    next: usize,
}

impl Rounds {
    pub fn new(
        capabilities: ClientCapabilities,
        answered: Vec<Round>,
        responses: InputResponses,
    ) -> Self {
        Self {
            detach: detach_for(&capabilities),
            capabilities,
            responses,
            state: Mutex::new(Replay { answered, next: 0 }),
        }
    }

    /// The same rounds, for a run where `detach` does `detach` (a task's own run).
    pub fn detaching(mut self, detach: Detach) -> Self {
        self.detach = detach;
        self
    }

    /// Every round answered, this request's included: what the next state holds.
    pub fn answered(&self) -> Vec<Round> {
        self.state.lock().expect("rounds lock").answered.clone()
    }
}

impl Client for Rounds {
    fn declared(&self) -> Declared {
        declared(&self.capabilities)
    }

    fn detach(&self) -> Detach {
        self.detach
    }

    fn ask(self: Arc<Self>, questions: Vec<Question>) -> Asked {
        let answer = (|| {
            if let Some(missing) = questions
                .iter()
                .map(needed)
                .find(|c| !declares(&self.capabilities, c))
            {
                return Err(AskError::MissingCapability(MissingCapability(missing)));
            }
            let mut state = self.state.lock().expect("rounds lock");
            let round = state.next;
            state.next += 1;
            if let Some(answers) = state.answered.get(round) {
                let same = answers.len() == questions.len()
                    && answers
                        .iter()
                        .zip(&questions)
                        .all(|((k, _), q)| *k == q.key);
                return if same {
                    Ok(answers.clone())
                } else {
                    Err(AskError::Refused(
                        "the tool asked other questions than when it ran before; a tool must \
                         ask the same questions each time it runs with the same answers"
                            .into(),
                    ))
                };
            }
            // Answers to questions asked before may come with this request; extra keys are
            // ignored, and a missing one asks the whole round again.
            let answers: Option<Round> = questions
                .iter()
                .map(|q| {
                    let answer = self.responses.get(&q.key).filter(|a| answers(q, a))?;
                    Some((q.key.clone(), answer.clone()))
                })
                .collect();
            match answers {
                Some(answers) => {
                    state.answered.push(answers.clone());
                    Ok(answers)
                }
                None => Err(AskError::InputRequired(InputRequired(questions))),
            }
        })();
        Box::pin(std::future::ready(answer))
    }
}
