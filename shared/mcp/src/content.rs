//! MCP `CallToolResult` -> what the model reads (docs/MCP.md).
//!
//! - Text blocks are inline: one or more text blocks become one string, so a
//!   `0.375` from the server reaches the model as `0.375`.
//! - Images, audio and resources become typed parts (`{"type": "image",
//!   "mime_type", "bytes", ...}`); binary data is inlined only when small,
//!   otherwise replaced by its size and sha256 so a screenshot cannot flood
//!   the context.
//! - `structuredContent` is the result's artifact, on success and on error:
//!   the application keeps it, the model does not read it (unless the server
//!   sent no content blocks at all, when it is the only answer there is).
//! - `isError: true` becomes a `business` tool error carrying the server's
//!   text, which the model reads and can recover from.

use base64::Engine as _;
use rmcp::model::{CallToolResult, ContentBlock, ResourceContents};
use serde_json::{Value, json};

use flotilla_agent::tool::ToolError;

/// Binary content up to this many bytes is inlined (base64) for the model.
pub const INLINE_BINARY_MAX: usize = 8 * 1024;

/// Maps one result to the tool outcome and its artifact.
pub fn to_outcome(result: CallToolResult) -> (Result<Value, ToolError>, Option<Value>) {
    let artifact = result.structured_content.clone();
    let parts: Vec<Value> = result.content.iter().map(part).collect();
    let all_text = parts.iter().all(|p| p.get("type") == Some(&json!("text")));
    let text = || -> String {
        parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join("\n")
    };
    if result.is_error == Some(true) {
        let mut message = text();
        if message.is_empty() {
            message = match &artifact {
                Some(a) => a.to_string(),
                None => "the tool reported an error without a message".into(),
            };
        }
        return (Err(ToolError::business(message)), artifact);
    }
    let value = if parts.is_empty() {
        artifact.clone().unwrap_or(Value::String(String::new()))
    } else if all_text {
        Value::String(text())
    } else {
        Value::Array(parts)
    };
    (Ok(value), artifact)
}

fn binary(kind: &str, mime_type: &str, data: &str) -> Value {
    let bytes = base64::engine::general_purpose::STANDARD.decode(data).map(|b| b.len()).unwrap_or(data.len() * 3 / 4);
    if bytes <= INLINE_BINARY_MAX {
        json!({"type": kind, "mime_type": mime_type, "bytes": bytes, "data": data})
    } else {
        let sha = flotilla_protocol::digest::sha256_hex(data.as_bytes());
        json!({"type": kind, "mime_type": mime_type, "bytes": bytes, "sha256_of_base64": sha, "omitted": "too large to inline"})
    }
}

fn part(block: &ContentBlock) -> Value {
    match block {
        ContentBlock::Text(t) => json!({"type": "text", "text": t.text}),
        ContentBlock::Image(i) => binary("image", &i.mime_type, &i.data),
        ContentBlock::Audio(a) => binary("audio", &a.mime_type, &a.data),
        ContentBlock::Resource(r) => match &r.resource {
            ResourceContents::TextResourceContents { uri, mime_type, text, .. } => {
                json!({"type": "resource", "uri": uri, "mime_type": mime_type, "text": text})
            }
            ResourceContents::BlobResourceContents { uri, mime_type, blob, .. } => {
                let mut v = binary("resource", mime_type.as_deref().unwrap_or("application/octet-stream"), blob);
                v["uri"] = json!(uri);
                v
            }
            other => json!({"type": "resource", "unsupported": serde_json::to_value(other).ok()}),
        },
        ContentBlock::ResourceLink(l) => {
            json!({"type": "resource_link", "uri": l.uri, "name": l.name, "mime_type": l.mime_type, "description": l.description})
        }
        // A content type newer than this client: pass it through as JSON.
        other => serde_json::to_value(other).unwrap_or(Value::Null),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_protocol::ErrorKind;

    fn result(v: Value) -> CallToolResult {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn text_is_inline_and_structured_content_is_the_artifact() {
        let (r, a) = to_outcome(result(json!({
            "content": [{"type": "text", "text": "0.375"}], "structuredContent": {"result": 0.375}
        })));
        assert_eq!(r.unwrap(), json!("0.375"));
        assert_eq!(a, Some(json!({"result": 0.375})));
    }

    #[test]
    fn is_error_is_a_business_error_that_keeps_its_artifact() {
        let (r, a) = to_outcome(result(json!({
            "content": [{"type": "text", "text": "revenue must be greater than zero"}],
            "structuredContent": {"error": {"code": "non_positive_revenue"}},
            "isError": true
        })));
        let e = r.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Business);
        assert_eq!(e.message, "revenue must be greater than zero");
        assert_eq!(a.unwrap()["error"]["code"], "non_positive_revenue");
    }

    #[test]
    fn media_become_typed_parts_and_big_blobs_are_not_inlined() {
        let small = base64::engine::general_purpose::STANDARD.encode([1u8; 10]);
        let big = base64::engine::general_purpose::STANDARD.encode(vec![0u8; INLINE_BINARY_MAX + 1]);
        let (r, _) = to_outcome(result(json!({"content": [
            {"type": "text", "text": "see"},
            {"type": "image", "data": small, "mimeType": "image/png"},
            {"type": "audio", "data": big, "mimeType": "audio/wav"},
            {"type": "resource", "resource": {"uri": "file:///a.txt", "mimeType": "text/plain", "text": "hello"}},
            {"type": "resource_link", "uri": "file:///b.txt", "name": "b"}
        ]})));
        let parts = r.unwrap();
        assert_eq!(parts[0], json!({"type": "text", "text": "see"}));
        assert_eq!(parts[1]["bytes"], 10);
        assert_eq!(parts[1]["data"], json!(small));
        assert!(parts[2].get("data").is_none() && parts[2]["bytes"] == json!(INLINE_BINARY_MAX + 1));
        assert_eq!(parts[3]["text"], "hello");
        assert_eq!(parts[4]["type"], "resource_link");
    }

    #[test]
    fn structured_only_results_are_not_empty() {
        let (r, _) = to_outcome(result(json!({"content": [], "structuredContent": {"n": 1}})));
        assert_eq!(r.unwrap(), json!({"n": 1}));
    }
}
