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
use rmcp::model::{
    ClientCapabilities, CustomNotification, InputRequest, InputRequests, InputResponses,
    ServerNotification, ServerRequest,
};
use rmcp::service::Peer;
use serde_json::Value;

use crate::sandbox::host::{
    Answers, AskError, Client, Declared, Detach, InputRequired, MOATS_OWN, MissingCapability,
    Question,
};

/// The answers of one round, in the order asked.
pub type Round = Vec<(String, Value)>;

type Asked = Pin<Box<dyn Future<Output = Result<Answers, AskError>> + Send>>;

/// The capability a client must declare for a question, in `ClientCapabilities` terms.
fn needed(question: &Question) -> &'static str {
    match question.method.as_str() {
        "sampling/createMessage" => "sampling",
        "roots/list" => "roots",
        _ if question.params["mode"] == "url" => "elicitation.url",
        _ => "elicitation",
    }
}

fn declares(capabilities: &ClientCapabilities, capability: &str) -> bool {
    match capability {
        "sampling" => capabilities.sampling.is_some(),
        "roots" => capabilities.roots.is_some(),
        // URL mode is declared on its own; a bare `elicitation: {}` means forms only.
        "elicitation.url" => capabilities
            .elicitation
            .as_ref()
            .is_some_and(|e| e.url.is_some()),
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
        elicitation_url: declares(capabilities, "elicitation.url"),
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

    fn elicitation_complete(&self, id: &str) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        let notification = CustomNotification::new(
            "notifications/elicitation/complete",
            Some(serde_json::json!({ "elicitationId": id })),
        );
        Box::pin(async move {
            let sent = self
                .peer
                .send_notification(ServerNotification::CustomNotification(notification))
                .await;
            if let Err(error) = sent {
                tracing::debug!("the client did not take an elicitation's completion: {error}");
            }
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
            // moat's own questions are asked only while what they ask for is missing (a
            // caller's consent): a run that no longer needs one goes past its round.
            while let Some(answered) = state.answered.get(state.next)
                && answered.iter().all(|(key, _)| key.starts_with(MOATS_OWN))
                && !same_keys(answered, &questions)
            {
                state.next += 1;
            }
            let round = state.next;
            state.next += 1;
            if let Some(answers) = state.answered.get(round) {
                return if same_keys(answers, &questions) {
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

/// Whether `answers` answer `questions`, key for key.
fn same_keys(answers: &Round, questions: &[Question]) -> bool {
    answers.len() == questions.len() && answers.iter().zip(questions).all(|((k, _), q)| *k == q.key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn question(key: &str, method: &str, params: Value) -> Question {
        Question {
            key: key.into(),
            method: method.into(),
            params,
            form: None,
        }
    }

    fn form(key: &str) -> Question {
        question(
            key,
            "elicitation/create",
            json!({"mode": "form", "message": "?"}),
        )
    }

    fn capabilities(value: Value) -> ClientCapabilities {
        serde_json::from_value(value).unwrap()
    }

    async fn ask(rounds: &Arc<Rounds>, questions: Vec<Question>) -> Result<Answers, AskError> {
        rounds.clone().ask(questions).await
    }

    #[tokio::test]
    async fn a_replay_goes_past_moats_own_round_once_it_is_no_longer_asked() {
        // A call asked for consent and waited for it (an answered round of moat's own), then
        // the guest asked "a". Replayed, the consent is no longer needed: "a" is the next round.
        let consent = (
            "moat:consent:tracker".to_string(),
            json!({"action": "accept"}),
        );
        let answered = vec![
            vec![consent.clone()],
            vec![("a".to_string(), json!({"action": "accept"}))],
        ];
        let rounds = Arc::new(Rounds::new(
            capabilities(json!({"elicitation": {}})),
            answered,
            [("b".to_string(), json!({"action": "decline"}))]
                .into_iter()
                .collect(),
        ));
        assert_eq!(ask(&rounds, vec![form("a")]).await.unwrap()[0].0, "a");
        assert_eq!(ask(&rounds, vec![form("b")]).await.unwrap()[0].0, "b");
        // Asked again (the token was dropped meanwhile), moat's own round is answered as before.
        let again = Arc::new(Rounds::new(
            capabilities(json!({"elicitation": {"url": {}}})),
            vec![vec![consent]],
            InputResponses::default(),
        ));
        let url = question(
            "moat:consent:tracker",
            "elicitation/create",
            json!({"mode": "url", "message": "?", "url": "https://t.example", "elicitationId": "e"}),
        );
        assert_eq!(
            ask(&again, vec![url]).await.unwrap()[0].1["action"],
            "accept"
        );
    }

    #[tokio::test]
    async fn a_replay_answers_each_round_then_asks_the_next() {
        let answered = vec![vec![("a".to_string(), json!({"action": "accept"}))]];
        let responses = [
            ("b".to_string(), json!({"action": "decline"})),
            ("extra".to_string(), json!({"action": "accept"})),
        ];
        let rounds = Arc::new(Rounds::new(
            capabilities(json!({"elicitation": {}})),
            answered,
            responses.into_iter().collect(),
        ));
        assert_eq!(
            ask(&rounds, vec![form("a")]).await.unwrap()[0].1["action"],
            "accept"
        );
        assert_eq!(
            ask(&rounds, vec![form("b")]).await.unwrap()[0].1["action"],
            "decline"
        );
        let third = ask(&rounds, vec![form("c")]).await.unwrap_err();
        assert!(matches!(third, AskError::InputRequired(InputRequired(q)) if q[0].key == "c"));
        // The round answered by this request's responses goes into the next state.
        assert_eq!(rounds.answered().len(), 2);
    }

    #[tokio::test]
    async fn a_replay_that_asks_otherwise_fails() {
        let answered = vec![vec![("a".to_string(), json!({"action": "accept"}))]];
        let rounds = Arc::new(Rounds::new(
            capabilities(json!({"elicitation": {}})),
            answered,
            Default::default(),
        ));
        let other = ask(&rounds, vec![form("not-a")]).await.unwrap_err();
        assert!(matches!(other, AskError::Refused(why) if why.contains("other questions")));
    }

    #[tokio::test]
    async fn an_answer_of_the_wrong_shape_is_asked_again() {
        let responses = [("a".to_string(), json!("yes"))];
        let rounds = Arc::new(Rounds::new(
            capabilities(json!({"elicitation": {}})),
            Vec::new(),
            responses.into_iter().collect(),
        ));
        let again = ask(&rounds, vec![form("a")]).await.unwrap_err();
        assert!(matches!(again, AskError::InputRequired(_)));
    }

    #[tokio::test]
    async fn each_question_needs_its_own_capability() {
        let forms_only = Arc::new(Rounds::new(
            capabilities(json!({"elicitation": {}})),
            Vec::new(),
            Default::default(),
        ));
        let page = question(
            "p",
            "elicitation/create",
            json!({"mode": "url", "url": "https://x"}),
        );
        let refused = ask(&forms_only, vec![page.clone()]).await.unwrap_err();
        assert!(matches!(
            refused,
            AskError::MissingCapability(MissingCapability("elicitation.url"))
        ));
        let sample = question("s", "sampling/createMessage", json!({}));
        let refused = ask(&forms_only, vec![form("f"), sample]).await.unwrap_err();
        assert!(matches!(
            refused,
            AskError::MissingCapability(MissingCapability("sampling"))
        ));
        assert!(!forms_only.declared().elicitation_url && forms_only.declared().elicitation);

        let pages = Arc::new(Rounds::new(
            capabilities(json!({"elicitation": {"url": {}}})),
            Vec::new(),
            Default::default(),
        ));
        assert!(matches!(
            ask(&pages, vec![page]).await.unwrap_err(),
            AskError::InputRequired(_)
        ));
        assert_eq!(pages.detach(), Detach::Unsupported);
        let tasks = Rounds::new(
            capabilities(json!({"extensions": {"io.modelcontextprotocol/tasks": {}}})),
            Vec::new(),
            Default::default(),
        );
        assert_eq!(tasks.detach(), Detach::Now);
        assert_eq!(tasks.detaching(Detach::Running).detach(), Detach::Running);
    }
}
