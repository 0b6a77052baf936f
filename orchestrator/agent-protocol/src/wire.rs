//! The wire of the Synadia Agent Protocol for NATS, version 0.3 (the spec's
//! `core-protocol.md`, and the official SDKs `synadia-ai-agents` 0.8.1 and
//! `synadia-ai-agent-service` 0.5.0 as its reference): subjects, the
//! request envelope, the typed stream chunks, the heartbeat payload and the
//! error frame. Written once, for the host (src/host.rs) and the caller
//! (src/caller.rs), so both ends speak exactly the same bytes.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// The micro-service name every protocol agent registers under (§3.1).
pub const SERVICE_NAME: &str = "agents";
/// The protocol version declared in `metadata.protocol_version` (§3.2).
pub const PROTOCOL_VERSION: &str = "0.3";
/// The queue group of the `prompt` and `status` endpoints (§3.3, §8.7).
pub const QUEUE_GROUP: &str = "agents";
/// The endpoint name of the prompt entry point (§2).
pub const PROMPT_ENDPOINT: &str = "prompt";
/// The endpoint name of the status request/reply (§8.7).
pub const STATUS_ENDPOINT: &str = "status";
/// Error headers of the NATS micro-service error response (§9.1).
pub const ERROR_CODE_HEADER: &str = "Nats-Service-Error-Code";
/// The description header of an error response (§9.1).
pub const ERROR_HEADER: &str = "Nats-Service-Error";

/// One agent instance's subject tree, `agents.<verb>.<agent>.<owner>.<name>` (§2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentSubjects {
    /// The harness identifier (`[a-z0-9-]+`).
    pub agent: String,
    /// The owner token.
    pub owner: String,
    /// The instance (session) name.
    pub name: String,
}

impl AgentSubjects {
    /// Checks each token against the protocol's naming rules (§2.2 and the
    /// SDKs' stricter ones: `agent` is `[a-z0-9-]+`, `owner` and `name`
    /// `[a-z0-9_-]+`), so a registration no SDK could address is refused at
    /// start, naming the token.
    pub fn new(agent: &str, owner: &str, name: &str) -> Result<Self, String> {
        check_token("agent", agent, false)?;
        check_token("owner", owner, true)?;
        check_token("session name", name, true)?;
        Ok(Self { agent: agent.into(), owner: owner.into(), name: name.into() })
    }

    /// `agents.prompt.<agent>.<owner>.<name>`.
    pub fn prompt(&self) -> String {
        self.with_verb("prompt")
    }

    /// `agents.hb.<agent>.<owner>.<name>` (protocol-fixed, §8.1).
    pub fn heartbeat(&self) -> String {
        self.with_verb("hb")
    }

    /// `agents.status.<agent>.<owner>.<name>`.
    pub fn status(&self) -> String {
        self.with_verb("status")
    }

    fn with_verb(&self, verb: &str) -> String {
        format!("agents.{verb}.{}.{}.{}", self.agent, self.owner, self.name)
    }
}

fn check_token(what: &str, token: &str, underscore: bool) -> Result<(), String> {
    let ok = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || (underscore && c == '_');
    if token.is_empty() || token.len() > 63 || !token.chars().all(ok) {
        let allowed = if underscore { "a-z, 0-9, '-' and '_'" } else { "a-z, 0-9 and '-'" };
        return Err(format!("{what} {token:?} is not a protocol subject token: use 1 to 63 of {allowed}"));
    }
    Ok(())
}

/// A prompt request or a query reply (§5.1, §7.2).
#[derive(Clone, Debug, PartialEq)]
pub struct Envelope {
    /// The prompt text, never empty.
    pub prompt: String,
    /// Attachments as sent (`{filename, content}` objects).
    pub attachments: Vec<Value>,
    /// Top-level fields the protocol does not define, kept (§5.6).
    pub extras: Map<String, Value>,
}

impl Envelope {
    /// A prompt with no attachments.
    pub fn text(prompt: impl Into<String>) -> Self {
        Self { prompt: prompt.into(), attachments: Vec::new(), extras: Map::new() }
    }

    /// Decodes a payload by the discrimination rule (§5.3): leading
    /// whitespace skipped, `{` starts a JSON envelope with a `prompt`
    /// string, anything else is UTF-8 prompt text. The error is the `400`
    /// description.
    pub fn decode(payload: &[u8]) -> Result<Self, String> {
        if payload.is_empty() {
            return Err("zero-byte payload: send the prompt as text or as {\"prompt\": \"...\"}".into());
        }
        let first = payload.iter().find(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'));
        if first != Some(&b'{') {
            let text =
                std::str::from_utf8(payload).map_err(|_| "payload is neither JSON nor UTF-8 text".to_string())?;
            if text.trim().is_empty() {
                return Err("the prompt is empty".into());
            }
            return Ok(Self::text(text));
        }
        let mut obj: Map<String, Value> =
            serde_json::from_slice(payload).map_err(|e| format!("malformed envelope JSON: {e}"))?;
        let prompt = match obj.remove("prompt") {
            Some(Value::String(p)) if !p.trim().is_empty() => p,
            Some(Value::String(_)) => return Err("the prompt is empty".into()),
            _ => return Err("the envelope has no `prompt` string".into()),
        };
        let attachments = match obj.remove("attachments") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(a)) => a,
            Some(_) => return Err("`attachments` must be an array".into()),
        };
        Ok(Self { prompt, attachments, extras: obj })
    }

    /// The JSON wire form (`attachments` omitted when empty).
    pub fn encode(&self) -> Vec<u8> {
        let mut obj = self.extras.clone();
        obj.insert("prompt".into(), Value::String(self.prompt.clone()));
        if !self.attachments.is_empty() {
            obj.insert("attachments".into(), Value::Array(self.attachments.clone()));
        }
        serde_json::to_vec(&obj).expect("a JSON object encodes")
    }
}

/// One non-terminating message of a response stream (§6.2–§7.1).
#[derive(Clone, Debug, PartialEq)]
pub enum Chunk {
    /// Content (§6.3). `extra` are fields beside `text` in the object form
    /// (Flotilla's `flotilla` marker), which callers tolerate (§6.6).
    Response {
        /// The text; callers concatenate the texts in order.
        text: String,
        /// Further fields of the `data` object; empty means the bare-string form.
        extra: Map<String, Value>,
    },
    /// A lifecycle token (§6.4): `ack`, or one callers ignore.
    Status(String),
    /// A question for the caller (§7.1).
    Query {
        /// Correlation id.
        id: String,
        /// Where the one reply goes.
        reply_subject: String,
        /// The question.
        prompt: String,
    },
}

impl Chunk {
    /// `{"type":"status","data":"ack"}`, the first message of every stream.
    pub fn ack() -> Self {
        Chunk::Status("ack".into())
    }

    /// A response chunk in the bare-string form.
    pub fn response(text: impl Into<String>) -> Self {
        Chunk::Response { text: text.into(), extra: Map::new() }
    }

    /// The wire form `{"type": …, "data": …}`.
    pub fn encode(&self) -> Vec<u8> {
        let v = match self {
            Chunk::Response { text, extra } if extra.is_empty() => json!({"type": "response", "data": text}),
            Chunk::Response { text, extra } => {
                let mut data = extra.clone();
                data.insert("text".into(), Value::String(text.clone()));
                json!({"type": "response", "data": data})
            }
            Chunk::Status(s) => json!({"type": "status", "data": s}),
            Chunk::Query { id, reply_subject, prompt } => {
                json!({"type": "query", "data": {"id": id, "reply_subject": reply_subject, "prompt": prompt}})
            }
        };
        serde_json::to_vec(&v).expect("a chunk encodes")
    }

    /// Decodes a non-empty stream message; `Ok(None)` for a chunk type this
    /// version does not know, which callers must skip (§6.6).
    pub fn decode(payload: &[u8]) -> Result<Option<Self>, String> {
        let v: Value = serde_json::from_slice(payload).map_err(|e| format!("malformed chunk JSON: {e}"))?;
        let Value::Object(mut obj) = v else { return Err("a chunk must be a JSON object".into()) };
        let Some(Value::String(kind)) = obj.remove("type") else { return Err("a chunk has no string `type`".into()) };
        let data = obj.remove("data").unwrap_or(Value::Null);
        match kind.as_str() {
            "response" => match data {
                Value::String(text) => Ok(Some(Chunk::response(text))),
                Value::Object(mut d) => match d.remove("text") {
                    Some(Value::String(text)) => Ok(Some(Chunk::Response { text, extra: d })),
                    _ => Err("a `response` chunk object has no `text` string".into()),
                },
                _ => Err("a `response` chunk's data is neither a string nor an object".into()),
            },
            "status" => match data {
                Value::String(s) => Ok(Some(Chunk::Status(s))),
                _ => Err("a `status` chunk's data is not a string".into()),
            },
            "query" => {
                let field = |k: &str| data.get(k).and_then(Value::as_str).map(str::to_string);
                match (field("id"), field("reply_subject"), field("prompt")) {
                    (Some(id), Some(reply_subject), Some(prompt)) => {
                        Ok(Some(Chunk::Query { id, reply_subject, prompt }))
                    }
                    _ => Err("a `query` chunk lacks `id`, `reply_subject` or `prompt`".into()),
                }
            }
            _ => Ok(None),
        }
    }
}

/// The heartbeat (§8.3) and the status reply (§8.7), one shape.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Heartbeat {
    /// `metadata.agent`.
    pub agent: String,
    /// `metadata.owner`.
    pub owner: String,
    /// `metadata.session`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// The micro-service instance id.
    pub instance_id: String,
    /// UTC ISO 8601 time of publication.
    pub ts: String,
    /// The cadence, seconds.
    pub interval_s: u64,
    /// The protocol version (the SDK hosts' declaration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol_version: Option<String>,
    /// The prompt endpoint's subject and metadata, so a listener can prompt
    /// without `$SRV.INFO` (the SDK hosts' declaration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoints: Option<Value>,
    /// Fields of later versions or other hosts, kept.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// An RFC 3339 UTC timestamp with second precision, as the heartbeat's `ts`.
pub fn now_ts() -> String {
    let now = time::OffsetDateTime::now_utc().replace_nanosecond(0).unwrap_or_else(|_| time::OffsetDateTime::now_utc());
    now.format(&time::format_description::well_known::Rfc3339).unwrap_or_default()
}

/// `max_payload` as the endpoint metadata writes it (§2.1): the largest
/// whole unit (`1MB`, `512KB`, `300B`).
pub fn format_bytes(n: usize) -> String {
    const UNITS: [(&str, usize); 3] = [("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)];
    for (unit, size) in UNITS {
        if n >= size && n.is_multiple_of(size) {
            return format!("{}{unit}", n / size);
        }
    }
    format!("{n}B")
}

/// Parses a `max_payload` value (`512KB`, `1MB`); `None` when malformed.
pub fn parse_bytes(s: &str) -> Option<usize> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit())?;
    let (n, unit) = s.split_at(split);
    let n: usize = n.parse().ok()?;
    let mult = match unit.to_ascii_uppercase().as_str() {
        "B" => 1,
        "KB" => 1 << 10,
        "MB" => 1 << 20,
        "GB" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(mult)
}

/// The JSON body of an error frame (§9.1).
pub fn error_body(error: &str, message: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({"error": error, "message": message})).expect("encodes")
}

/// A header value without line breaks and at most 200 characters, as the
/// SDK hosts send (a newline would end the NATS header block).
pub fn header_text(s: &str) -> String {
    let flat = s.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" | ");
    if flat.chars().count() > 200 { format!("{}...", flat.chars().take(197).collect::<String>()) } else { flat }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelopes_follow_the_discrimination_rule() {
        assert_eq!(Envelope::decode(b"  hello").unwrap().prompt, "  hello");
        let e = Envelope::decode(br#" {"prompt": "hi", "x": 1}"#).unwrap();
        assert_eq!(e.prompt, "hi");
        assert_eq!(e.extras["x"], 1);
        assert!(Envelope::decode(b"").unwrap_err().contains("zero-byte"));
        assert!(Envelope::decode(br#"{"text": "hi"}"#).unwrap_err().contains("no `prompt`"));
        assert!(Envelope::decode(b"{not json").unwrap_err().contains("malformed"));
        assert!(Envelope::decode(&[0xff, 0xfe]).is_err());
        let round = Envelope::decode(&Envelope::decode(br#"{"prompt": "p", "k": [1]}"#).unwrap().encode()).unwrap();
        assert_eq!(round.extras["k"], json!([1]));
    }

    #[test]
    fn chunks_have_the_sdk_wire_forms() {
        assert_eq!(Chunk::ack().encode(), br#"{"data":"ack","type":"status"}"#.to_vec());
        assert_eq!(Chunk::decode(br#"{"type":"response","data":"hi"}"#).unwrap(), Some(Chunk::response("hi")));
        let obj = Chunk::decode(br#"{"type":"response","data":{"text":"a","flotilla":"progress"}}"#).unwrap().unwrap();
        assert_eq!(Chunk::decode(&obj.encode()).unwrap().unwrap(), obj);
        let q = Chunk::Query { id: "1".into(), reply_subject: "_INBOX.x".into(), prompt: "ok?".into() };
        assert_eq!(Chunk::decode(&q.encode()).unwrap().unwrap(), q);
        assert_eq!(Chunk::decode(br#"{"type":"thinking","data":"..."}"#).unwrap(), None, "unknown types are skipped");
        assert!(Chunk::decode(b"plain text").is_err());
    }

    #[test]
    fn subjects_and_sizes() {
        let s = AgentSubjects::new("flotilla", "acme", "default").unwrap();
        assert_eq!(s.prompt(), "agents.prompt.flotilla.acme.default");
        assert_eq!(s.heartbeat(), "agents.hb.flotilla.acme.default");
        assert!(AgentSubjects::new("Flotilla", "acme", "default").unwrap_err().contains("agent \"Flotilla\""));
        assert!(AgentSubjects::new("a", "ac.me", "x").is_err());
        assert_eq!(format_bytes(1 << 20), "1MB");
        assert_eq!(format_bytes(1000), "1000B");
        assert_eq!(parse_bytes("512KB"), Some(512 * 1024));
        assert_eq!(parse_bytes("1mb"), Some(1 << 20));
        assert_eq!(parse_bytes("lots"), None);
        assert_eq!(header_text("a\nb"), "a | b");
    }
}
