//! A model endpoint for unit tests of the providers (`openai/tests.rs`,
//! `anthropic/tests.rs`): a real HTTP server on 127.0.0.1 that plays canned answers in
//! order (JSON, raw text or server-sent events) and records every request.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use flotilla_agent::model::DeltaSink;

/// One answer of the fake server.
#[derive(Clone)]
pub struct Canned {
    status: u16,
    content_type: &'static str,
    headers: Vec<(&'static str, String)>,
    body: String,
    delay: Duration,
}

impl Canned {
    /// A JSON body with `status`.
    pub fn json(status: u16, body: Value) -> Self {
        Self::raw(status, &body.to_string())
    }

    /// A body as given, labelled JSON.
    pub fn raw(status: u16, body: &str) -> Self {
        Self { status, content_type: "application/json", headers: Vec::new(), body: body.into(), delay: Duration::ZERO }
    }

    /// A 200 `text/event-stream` of `events`: `(event name, data)` each.
    pub fn sse(events: &[(Option<&str>, String)]) -> Self {
        let mut body = String::new();
        for (name, data) in events {
            if let Some(name) = name {
                body.push_str(&format!("event: {name}\n"));
            }
            body.push_str(&format!("data: {data}\n\n"));
        }
        Self { content_type: "text/event-stream", ..Self::raw(200, &body) }
    }

    /// Adds a response header.
    pub fn header(mut self, name: &'static str, value: &str) -> Self {
        self.headers.push((name, value.into()));
        self
    }

    /// Answers after `delay`.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }
}

/// A request the fake server received.
#[derive(Clone, Debug)]
pub struct Seen {
    /// The path, e.g. `/v1/messages`.
    pub path: String,
    /// The headers.
    pub headers: HeaderMap,
    /// The JSON body (`null` when it was not JSON).
    pub body: Value,
    /// The body's bytes as they arrived.
    pub raw: Bytes,
}

impl Seen {
    /// A header's value as text.
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers.get(name).map(|v| v.to_str().unwrap_or_default().to_owned())
    }
}

/// The fake server: plays `answers` in order, repeating the last one forever.
pub struct Server {
    answers: Vec<Canned>,
    seen: Mutex<Vec<Seen>>,
}

impl Server {
    /// Starts it on a free port; returns `http://<addr><base_path>` and it.
    pub async fn start(base_path: &str, answers: Vec<Canned>) -> (String, Arc<Server>) {
        assert!(!answers.is_empty());
        let server = Arc::new(Server { answers, seen: Mutex::new(Vec::new()) });
        let app = Router::new().fallback(answer).with_state(server.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (format!("http://{addr}{base_path}"), server)
    }

    /// Every request so far, in order.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

async fn answer(State(server): State<Arc<Server>>, uri: axum::http::Uri, headers: HeaderMap, body: Bytes) -> Response {
    let canned = {
        let mut seen = server.seen.lock().unwrap();
        seen.push(Seen {
            path: uri.path().to_owned(),
            headers,
            body: serde_json::from_slice(&body).unwrap_or(Value::Null),
            raw: body,
        });
        server.answers[(seen.len() - 1).min(server.answers.len() - 1)].clone()
    };
    tokio::time::sleep(canned.delay).await;
    let mut response = (StatusCode::from_u16(canned.status).unwrap(), canned.body).into_response();
    response.headers_mut().insert("content-type", canned.content_type.parse().unwrap());
    for (name, value) in canned.headers {
        response.headers_mut().insert(name, value.parse().unwrap());
    }
    response
}

/// Sets a test-only environment variable holding a fake key.
pub fn set_key(var: &str, key: &str) {
    // SAFETY: the variable name is unique to one test and read only by that
    // test; Rust's own environment accesses are serialized by std.
    unsafe { std::env::set_var(var, key) };
}

/// Collects the text a streaming model hands to its delta sink.
#[derive(Default)]
pub struct Deltas(Mutex<Vec<String>>);

impl Deltas {
    /// Every piece so far, in order.
    pub fn texts(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

#[async_trait::async_trait]
impl DeltaSink for Deltas {
    async fn delta(&self, text: &str) {
        self.0.lock().unwrap().push(text.to_owned());
    }
}
