//! MCP elicitation (`elicitation/create`) answered by a person through
//! Flotilla approvals (docs/APPROVALS.md, "Elicitation").
//!
//! A server asks for input in the middle of a tool call; a worker has no
//! person at hand, so the request becomes an approval request and the answer
//! (content, decline or cancel) goes back to the server. SEP-1034 lets a
//! schema give defaults; [`apply_defaults`] fills the fields a person left
//! out so the server receives them, as the spec asks of clients.
//!
//! [`FlotillaClient`] is the `ClientHandler` of every session: it advertises
//! form-mode elicitation and hands each request to the [`Responder`] of the
//! tool call it belongs to. Over Streamable HTTP rmcp marks a server request
//! with the POST whose SSE stream carried it (`InboundStreamOrigin`, the
//! outbound `tools/call` id), which identifies the call exactly. Over stdio
//! nothing relates them; the session's one call in flight is meant, and with
//! several the request is declined (logged): answering for the wrong call
//! would show a person the wrong context.
//!
//! A person may take minutes; the call's `call_timeout` clock stops while
//! one of its questions waits for them (`Registered::timed_out`), as the
//! tool timeout's does (shared/agent/src/tool/pipeline/timeout.rs).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use rmcp::model::{ClientConfig, ElicitRequestParams, ElicitResult, ElicitationAction, ErrorData, RequestId};
use rmcp::service::{InboundStreamOrigin, RequestContext};
use rmcp::{ClientHandler, RoleClient};
use serde_json::Value;
use tokio::sync::watch;

/// What a server asked for in form mode.
#[derive(Clone, Debug)]
pub struct Elicitation {
    /// The server's name in the config.
    pub server: String,
    /// What the server says it needs.
    pub message: String,
    /// The JSON Schema of the content it wants (an object of primitives).
    pub requested_schema: Value,
}

/// Answers the elicitations of one tool call (the worker asks a person
/// through approvals). Content of an `accept` gets its defaults applied by
/// the handler before it goes back.
#[async_trait]
pub trait Responder: Send + Sync {
    /// The person's answer.
    async fn respond(&self, elicitation: Elicitation) -> ElicitResult;
}

/// One tool call in flight on a session.
struct InFlight {
    token: u64,
    /// The `tools/call` request id, once sent.
    id: Option<RequestId>,
    /// Where its elicitations go; none: declined.
    responder: Option<Arc<dyn Responder>>,
    /// How many of its questions wait for a person now.
    answering: Arc<watch::Sender<usize>>,
}

/// The call a question belongs to.
struct Target {
    responder: Option<Arc<dyn Responder>>,
    answering: Arc<watch::Sender<usize>>,
}

/// Counts one question as waiting for a person until dropped.
struct Answering(Arc<watch::Sender<usize>>);

impl Answering {
    fn start(count: Arc<watch::Sender<usize>>) -> Self {
        count.send_modify(|n| *n += 1);
        Self(count)
    }
}

impl Drop for Answering {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n -= 1);
    }
}

/// The tool calls in flight on one session, shared by the session and its
/// handler.
#[derive(Clone, Default)]
pub(crate) struct Calls {
    inner: Arc<Mutex<(u64, Vec<InFlight>)>>,
}

/// Keeps a call registered until dropped.
pub(crate) struct Registered {
    calls: Calls,
    token: u64,
    answering: watch::Receiver<usize>,
}

impl Calls {
    fn lock(&self) -> std::sync::MutexGuard<'_, (u64, Vec<InFlight>)> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a call before its request is sent (a server may ask at once).
    pub(crate) fn register(&self, responder: Option<Arc<dyn Responder>>) -> Registered {
        let mut g = self.lock();
        g.0 += 1;
        let token = g.0;
        let (answering, watching) = watch::channel(0);
        g.1.push(InFlight { token, id: None, responder, answering: Arc::new(answering) });
        Registered { calls: self.clone(), token, answering: watching }
    }

    /// The responder for a request that arrived on `origin`'s stream.
    fn target(&self, origin: Option<&InboundStreamOrigin>) -> Result<Target, String> {
        let g = self.lock();
        let target = |c: &InFlight| Target { responder: c.responder.clone(), answering: c.answering.clone() };
        if let Some(InboundStreamOrigin::OutboundRequest(id)) = origin {
            if let Some(call) = g.1.iter().find(|c| c.id.as_ref() == Some(id)) {
                return Ok(target(call));
            }
            // The question can beat `sent_as`: then it is the one call whose
            // id is not recorded yet, if there is exactly one.
            if let [call] = g.1.iter().filter(|c| c.id.is_none()).collect::<Vec<_>>()[..] {
                return Ok(target(call));
            }
        }
        match g.1.as_slice() {
            [one] => Ok(target(one)),
            [] => Err("no tool call is in flight on this session".into()),
            many => Err(format!("{} tool calls are in flight on this session and the request names none", many.len())),
        }
    }
}

impl Registered {
    /// Records the id the call's request was sent under.
    pub(crate) fn sent_as(&self, id: RequestId) {
        if let Some(c) = self.calls.lock().1.iter_mut().find(|c| c.token == self.token) {
            c.id = Some(id);
        }
    }

    /// Resolves once `timeout` has run out, not counting the time a
    /// question of this call waited for a person.
    pub(crate) async fn timed_out(&self, timeout: Duration) {
        let mut answering = self.answering.clone();
        let mut left = timeout;
        loop {
            if *answering.borrow_and_update() > 0 {
                if answering.wait_for(|n| *n == 0).await.is_err() {
                    break;
                }
                continue;
            }
            let started = tokio::time::Instant::now();
            tokio::select! {
                _ = tokio::time::sleep(left) => return,
                changed = answering.changed() => {
                    left = left.saturating_sub(started.elapsed());
                    if changed.is_err() {
                        break;
                    }
                }
            }
        }
        // The call was forgotten (cannot happen while `self` lives): plain clock.
        tokio::time::sleep(left).await;
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.calls.lock().1.retain(|c| c.token != self.token);
    }
}

/// The `ClientHandler` of Flotilla's sessions (see the module docs).
pub struct FlotillaClient {
    server: String,
    info: ClientConfig,
    calls: Calls,
}

impl FlotillaClient {
    pub(crate) fn new(server: String, info: ClientConfig, calls: Calls) -> Self {
        Self { server, info, calls }
    }
}

impl ClientHandler for FlotillaClient {
    fn get_info(&self) -> ClientConfig {
        self.info.clone()
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let target = self.calls.target(context.extensions.get::<InboundStreamOrigin>());
        ask(&self.server, target, request, context.ct).await
    }
}

impl Registered {
    /// Answers a question the server asked this call in an `input_required`
    /// result (2026-07-28, SEP-2322): the call is known, so no stream has to
    /// name it.
    pub(crate) async fn answer(&self, server: &str, request: ElicitRequestParams) -> Result<ElicitResult, ErrorData> {
        let target = self
            .calls
            .lock()
            .1
            .iter()
            .find(|c| c.token == self.token)
            .map(|c| Target { responder: c.responder.clone(), answering: c.answering.clone() })
            .ok_or_else(|| "the call is no longer in flight".to_string());
        // The server cannot withdraw a question it put in a result: the call
        // ends (and drops this future) instead.
        ask(server, target, request, tokio_util::sync::CancellationToken::new()).await
    }
}

/// One form-mode question to `target`'s person, the answer with the
/// schema's defaults applied; declined when nobody can answer (URL mode is
/// not offered, the call takes no answers, or no call is meant).
async fn ask(
    server: &str,
    target: Result<Target, String>,
    request: ElicitRequestParams,
    cancelled: tokio_util::sync::CancellationToken,
) -> Result<ElicitResult, ErrorData> {
    let ElicitRequestParams::FormElicitationParams { message, requested_schema, .. } = request else {
        tracing::warn!(server = %server, "URL-mode elicitation is not supported (not advertised); declined");
        return Ok(ElicitResult::new(ElicitationAction::Decline));
    };
    let (responder, answering) = match target {
        Ok(Target { responder: Some(r), answering }) => (r, answering),
        Ok(Target { responder: None, .. }) => {
            tracing::info!(server = %server, "elicitation declined: the call in flight takes no answers");
            return Ok(ElicitResult::new(ElicitationAction::Decline));
        }
        Err(why) => {
            tracing::warn!(server = %server, "elicitation declined: {why}");
            return Ok(ElicitResult::new(ElicitationAction::Decline));
        }
    };
    let requested_schema = serde_json::to_value(&requested_schema)
        .map_err(|e| ErrorData::invalid_params(format!("unusable requested schema: {e}"), None))?;
    let asked = Elicitation { server: server.to_string(), message, requested_schema: requested_schema.clone() };
    let waiting = Answering::start(answering);
    let mut answer = tokio::select! {
        answer = responder.respond(asked) => answer,
        // The server gave up on its request (notifications/cancelled).
        _ = cancelled.cancelled() => ElicitResult::new(ElicitationAction::Cancel),
    };
    drop(waiting);
    if answer.action == ElicitationAction::Accept {
        let given = answer.content.take().unwrap_or_else(|| Value::Object(Default::default()));
        answer.content = Some(apply_defaults(&requested_schema, &given));
    } else {
        answer.content = None;
    }
    Ok(answer)
}

/// Content with SEP-1034 defaults applied: every top-level property of
/// `schema` (`{"type":"object","properties":{..}}`) that has a `default`
/// and is missing from `content` is added with that default. Fields present
/// in `content` are kept as given; content that is not an object is returned
/// unchanged (the schema validation that follows reports it).
pub fn apply_defaults(schema: &Value, content: &Value) -> Value {
    let (Some(properties), Some(given)) = (schema.get("properties").and_then(Value::as_object), content.as_object())
    else {
        return content.clone();
    };
    let mut filled = given.clone();
    for (name, property) in properties {
        if let Some(default) = property.get("default") {
            filled.entry(name.clone()).or_insert_with(|| default.clone());
        }
    }
    Value::Object(filled)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "approve": {"type": "boolean"},
                "note": {"type": "string", "default": "none"},
                "count": {"type": "integer", "default": 3},
                "level": {"type": "string", "enum": ["low", "high"], "default": "low"}
            },
            "required": ["approve"]
        })
    }

    #[test]
    fn missing_fields_get_their_defaults() {
        let filled = apply_defaults(&schema(), &json!({"approve": true}));
        assert_eq!(filled, json!({"approve": true, "note": "none", "count": 3, "level": "low"}));
    }

    #[test]
    fn given_fields_are_kept_even_when_they_differ_from_the_default() {
        let filled =
            apply_defaults(&schema(), &json!({"approve": false, "note": "later", "count": 0, "level": "high"}));
        assert_eq!(filled, json!({"approve": false, "note": "later", "count": 0, "level": "high"}));
    }

    #[test]
    fn fields_without_default_stay_missing() {
        let filled = apply_defaults(&schema(), &json!({}));
        assert_eq!(filled, json!({"note": "none", "count": 3, "level": "low"}));
    }

    struct Named(&'static str);

    #[async_trait]
    impl Responder for Named {
        async fn respond(&self, _: Elicitation) -> ElicitResult {
            ElicitResult::new(ElicitationAction::Accept).with_content(json!({"from": self.0}))
        }
    }

    async fn who(calls: &Calls, origin: Option<&InboundStreamOrigin>) -> Result<Value, String> {
        let r = calls.target(origin)?.responder.expect("a responder");
        let asked = Elicitation { server: "s".into(), message: "m".into(), requested_schema: json!({}) };
        Ok(r.respond(asked).await.content.unwrap()["from"].clone())
    }

    /// The stream a request arrived on picks its call among several; without
    /// it only a lone call may be meant, and a finished call is forgotten.
    #[tokio::test]
    async fn a_request_goes_to_the_call_whose_stream_carried_it() {
        let calls = Calls::default();
        let a = calls.register(Some(Arc::new(Named("a"))));
        a.sent_as(RequestId::Number(1));
        assert_eq!(who(&calls, None).await.unwrap(), "a", "the lone call in flight");
        let b = calls.register(Some(Arc::new(Named("b"))));
        b.sent_as(RequestId::Number(2));
        let on = |n| InboundStreamOrigin::OutboundRequest(RequestId::Number(n));
        assert_eq!(who(&calls, Some(&on(2))).await.unwrap(), "b");
        assert_eq!(who(&calls, Some(&on(1))).await.unwrap(), "a");
        let e = who(&calls, None).await.unwrap_err();
        assert!(e.contains("2 tool calls are in flight"), "{e}");
        let e = who(&calls, Some(&InboundStreamOrigin::Unassociated)).await.unwrap_err();
        assert!(e.contains("2 tool calls"), "{e}");
        // A question faster than its call's `sent_as`: the one call without an id.
        let c = calls.register(Some(Arc::new(Named("c"))));
        assert_eq!(who(&calls, Some(&on(3))).await.unwrap(), "c");
        let d = calls.register(Some(Arc::new(Named("d"))));
        assert!(who(&calls, Some(&on(3))).await.unwrap_err().contains("4 tool calls"));
        drop((c, d));
        drop(b);
        assert_eq!(who(&calls, None).await.unwrap(), "a");
        drop(a);
        assert!(who(&calls, None).await.unwrap_err().contains("no tool call"));
    }

    /// The call's clock stops while a person answers one of its questions
    /// and runs again afterwards (paused tokio time: no real waiting).
    #[tokio::test(start_paused = true)]
    async fn the_call_timeout_does_not_count_a_persons_answer() {
        let calls = Calls::default();
        let call = calls.register(None);
        let start = tokio::time::Instant::now();
        let target = calls.target(None).unwrap();
        let person = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let waiting = Answering::start(target.answering);
            tokio::time::sleep(Duration::from_secs(100)).await;
            drop(waiting);
        });
        call.timed_out(Duration::from_secs(3)).await;
        assert_eq!(start.elapsed().as_secs(), 103, "1 s before the question, 100 s answering, 2 s after");
        person.await.unwrap();
        let idle = calls.register(None);
        let start = tokio::time::Instant::now();
        idle.timed_out(Duration::from_secs(3)).await;
        assert_eq!(start.elapsed().as_secs(), 3);
    }

    #[test]
    fn non_object_content_or_schema_is_returned_unchanged() {
        assert_eq!(apply_defaults(&schema(), &json!("yes")), json!("yes"));
        assert_eq!(apply_defaults(&json!({"type": "object"}), &json!({"a": 1})), json!({"a": 1}));
    }
}
