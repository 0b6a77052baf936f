//! Server-sent events (the `text/event-stream` format of the WHATWG HTML
//! spec), as both providers stream answers with `stream: true`: lines of
//! `field: value`, an event ends at a blank line, `data` lines join with
//! newlines, `:` starts a comment. Bytes arrive in arbitrary pieces, so the
//! reader keeps an unfinished line until the rest comes.

/// One event: its `event:` name (Anthropic names every event; OpenAI sends
/// none) and its data.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, when sent.
    pub event: Option<String>,
    /// The `data:` lines, joined with `\n`.
    pub data: String,
}

/// Splits a byte stream into events.
#[derive(Default)]
pub struct SseReader {
    /// Bytes after the last complete line.
    partial: Vec<u8>,
    /// The event being read.
    current: SseEvent,
    /// Whether the current event has any field yet.
    started: bool,
}

impl SseReader {
    /// Takes the next piece of the body; returns the events it completed.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<SseEvent> {
        self.partial.extend_from_slice(bytes);
        let mut events = Vec::new();
        while let Some(end) = self.partial.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line);
            let line = line.trim_end_matches(['\n', '\r']);
            if let Some(event) = self.line(line) {
                events.push(event);
            }
        }
        events
    }

    /// The event left when the body ended without a final blank line; it
    /// is returned once.
    pub fn finish(&mut self) -> Option<SseEvent> {
        if !self.partial.is_empty() {
            let rest = String::from_utf8_lossy(&std::mem::take(&mut self.partial)).into_owned();
            self.line(rest.trim_end_matches('\r'));
        }
        self.line("")
    }

    fn line(&mut self, line: &str) -> Option<SseEvent> {
        if line.is_empty() {
            let event = std::mem::take(&mut self.current);
            return std::mem::take(&mut self.started).then_some(event);
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "event" => self.current.event = Some(value.to_owned()),
            "data" => {
                if self.started && !self.current.data.is_empty() {
                    self.current.data.push('\n');
                }
                self.current.data.push_str(value);
            }
            // `id` and `retry` matter to browsers reconnecting, not to us.
            _ => return None,
        }
        self.started = true;
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(name: Option<&str>, data: &str) -> SseEvent {
        SseEvent { event: name.map(Into::into), data: data.into() }
    }

    #[test]
    fn events_split_at_blank_lines_whatever_the_pieces() {
        let body =
            b": keep-alive\r\nevent: message_start\r\ndata: {\"a\":1}\r\n\r\ndata: one\ndata: two\n\ndata: [DONE]\n\n";
        let expected = vec![event(Some("message_start"), "{\"a\":1}"), event(None, "one\ntwo"), event(None, "[DONE]")];
        let mut whole = SseReader::default();
        assert_eq!(whole.push(body), expected);
        assert_eq!(whole.finish(), None);
        for size in 1..7 {
            let mut reader = SseReader::default();
            let events: Vec<_> = body.chunks(size).flat_map(|piece| reader.push(piece)).collect();
            assert_eq!(events, expected, "pieces of {size} bytes");
        }
    }

    #[test]
    fn an_event_without_its_blank_line_ends_with_the_body() {
        let mut reader = SseReader::default();
        assert!(reader.push(b"data: {\"x\":").is_empty());
        assert!(reader.push(b"2}").is_empty());
        assert_eq!(reader.finish(), Some(event(None, "{\"x\":2}")));
    }
}
