//! A model API in the test process, speaking the real wire protocol over
//! HTTP: the one part of a deployment that cannot run here (a paid or local
//! model). Workers reach it through their real provider code, so a test sees
//! exactly the requests a model would receive, and decides each answer.
//!
//! One request per connection (`Connection: close`); the answer is a JSON
//! body with status 200 unless the answer function returns a [`Reply`] with
//! another status, or server-sent events ([`Reply::sse`]) for a streaming
//! request. The same server speaks Anthropic's Messages API when the answer
//! function answers in that format (tests/kit/src/anthropic.rs): requests go
//! to `{root}/v1/messages` instead of `{url}/chat/completions`.

use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// An HTTP answer: status and JSON body, or a stream of events.
pub struct Reply {
    /// HTTP status code.
    pub status: u16,
    /// The body.
    pub body: Value,
    /// A `text/event-stream` body instead of `body`, when set.
    pub events: Option<String>,
}

impl From<Value> for Reply {
    fn from(body: Value) -> Self {
        Self { status: 200, body, events: None }
    }
}

impl Reply {
    /// A 200 `text/event-stream` of `events`: `(event name, data)` each.
    pub fn sse(events: &[(Option<&str>, String)]) -> Self {
        let mut text = String::new();
        for (name, data) in events {
            if let Some(name) = name {
                text.push_str(&format!("event: {name}\n"));
            }
            text.push_str(&format!("data: {data}\n\n"));
        }
        Self { status: 200, body: Value::Null, events: Some(text) }
    }
}

/// Decides the answer to one request body.
pub type Answer = Arc<dyn Fn(Value) -> BoxFuture<'static, Reply> + Send + Sync>;

/// A running endpoint; it stops with the test's runtime.
pub struct ChatEndpoint {
    /// Base URL, e.g. `http://127.0.0.1:40123/v1`: what an `openai`
    /// model's `base_url` takes.
    pub url: String,
    /// `http://127.0.0.1:40123`: what an `anthropic` model's `base_url` takes.
    pub root: String,
    requests: Arc<Mutex<Vec<Value>>>,
}

impl ChatEndpoint {
    /// Listens on a free loopback port and answers every request with `answer`.
    pub async fn start(answer: Answer) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the model endpoint");
        let root = format!("http://{}", listener.local_addr().expect("its address"));
        let url = format!("{root}/v1");
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = requests.clone();
        tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                tokio::spawn(serve(conn, answer.clone(), seen.clone()));
            }
        });
        Self { url, root, requests }
    }

    /// Every request body received so far, in order.
    pub fn requests(&self) -> Vec<Value> {
        self.requests.lock().unwrap().clone()
    }
}

async fn serve(mut conn: tokio::net::TcpStream, answer: Answer, seen: Arc<Mutex<Vec<Value>>>) {
    let Some(body) = read_request(&mut conn).await else { return };
    seen.lock().unwrap().push(body.clone());
    let reply = answer(body).await;
    let (kind, text) = match reply.events {
        Some(events) => ("text/event-stream", events),
        None => ("application/json", reply.body.to_string()),
    };
    let head = format!(
        "HTTP/1.1 {} X\r\ncontent-type: {kind}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        reply.status,
        text.len()
    );
    let _ = conn.write_all(format!("{head}{text}").as_bytes()).await;
}

/// Reads one HTTP/1.1 request; returns its JSON body.
pub(crate) async fn read_request(conn: &mut tokio::net::TcpStream) -> Option<Value> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let split = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = conn.read(&mut chunk).await.ok().filter(|n| *n > 0)?;
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..split]).to_ascii_lowercase();
    let length: usize =
        head.lines().find_map(|l| l.strip_prefix("content-length:")).and_then(|v| v.trim().parse().ok())?;
    while buf.len() < split + length {
        let n = conn.read(&mut chunk).await.ok().filter(|n| *n > 0)?;
        buf.extend_from_slice(&chunk[..n]);
    }
    serde_json::from_slice(&buf[split..split + length]).ok()
}

/// The conversation of an OpenAI chat request: its first user message (the
/// task) and how many model turns it already holds.
pub fn task_and_step(body: &Value) -> (String, usize) {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let task = messages.iter().find(|m| m["role"] == "user").and_then(|m| m["content"].as_str()).unwrap_or("");
    (task.to_string(), messages.iter().filter(|m| m["role"] == "assistant").count())
}

/// An OpenAI chat completion answering with `content`.
pub fn text_reply(content: &str) -> Value {
    json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
           "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})
}

/// An OpenAI chat completion calling `name` with `args` (call id `id`).
pub fn tool_call_reply(id: &str, name: &str, args: &Value) -> Value {
    json!({"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": null,
           "tool_calls": [{"id": id, "type": "function",
                           "function": {"name": name, "arguments": args.to_string()}}]}}],
           "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})
}

/// `text` cut into at most `n` pieces (whole characters), in order.
pub fn pieces(text: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(chars.len().div_ceil(n.max(1)).max(1)).map(|piece| piece.iter().collect()).collect()
}

/// `completion` (made by [`text_reply`] or [`tool_call_reply`]) as the
/// chunks an OpenAI-compatible server streams: the text in `n` deltas, each
/// call's name then its arguments in two pieces, the usage in a last chunk
/// (`stream_options.include_usage`), then `[DONE]`.
pub fn stream_reply(completion: &Value, n: usize) -> Reply {
    let message = &completion["choices"][0]["message"];
    let chunk = |delta: Value| {
        let data = json!({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]});
        (None, data.to_string())
    };
    let mut events = vec![chunk(json!({"role": "assistant"}))];
    for piece in pieces(message["content"].as_str().unwrap_or_default(), n) {
        events.push(chunk(json!({"content": piece})));
    }
    for (index, call) in message["tool_calls"].as_array().cloned().unwrap_or_default().iter().enumerate() {
        let function = &call["function"];
        events.push(chunk(json!({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                                 "function": {"name": function["name"], "arguments": ""}}]})));
        for part in pieces(function["arguments"].as_str().unwrap_or_default(), 2) {
            events.push(chunk(json!({"tool_calls": [{"index": index, "function": {"arguments": part}}]})));
        }
    }
    events.push((None, json!({"choices": [], "usage": completion["usage"]}).to_string()));
    events.push((None, "[DONE]".to_string()));
    Reply::sse(&events)
}
