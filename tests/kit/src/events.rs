//! Collects bus messages (events, progress, reports) for assertions, and
//! awaits specific ones instead of sleeping.

use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;
use tokio::sync::mpsc;

/// The task a bus message is about: the last token of a progress subject
/// (a progress body leaves the job and task to its subject,
/// docs/PROTOCOL.md), else the body's `task_id` (empty when it has none).
pub fn task_of(subject: &str, body: &Value) -> String {
    if subject.contains(".progress.") {
        return subject.rsplit('.').next().unwrap_or_default().to_string();
    }
    body["task_id"].as_str().unwrap_or_default().to_string()
}

/// Messages seen on a subject filter, in arrival order.
pub struct EventLog {
    rx: mpsc::UnboundedReceiver<(String, Value)>,
    /// Everything received so far: (subject, JSON body).
    pub seen: Vec<(String, Value)>,
}

impl EventLog {
    /// Subscribes (core NATS) to `subject`; call before the activity starts.
    pub async fn subscribe(client: &async_nats::Client, subject: &str) -> Self {
        let mut sub = client.subscribe(subject.to_string()).await.expect("subscribe");
        client.flush().await.expect("flush");
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Some(m) = sub.next().await {
                // A step's progress event arrives in its journal entry's
                // header, republished without the body (shared/bus/src/journal.rs).
                let body = flotilla_bus::event_body(&m.payload, m.headers.as_ref());
                let v = serde_json::from_slice(&body).unwrap_or(Value::Null);
                if tx.send((m.subject.to_string(), v)).is_err() {
                    return;
                }
            }
        });
        Self { rx, seen: Vec::new() }
    }

    /// Waits for the first message (already seen or new) matching `pred`.
    pub async fn until(&mut self, timeout: Duration, what: &str, pred: impl Fn(&str, &Value) -> bool) -> Value {
        if let Some((_, v)) = self.seen.iter().find(|(s, v)| pred(s, v)) {
            return v.clone();
        }
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            match tokio::time::timeout_at(deadline, self.rx.recv()).await {
                Ok(Some((s, v))) => {
                    let hit = pred(&s, &v);
                    self.seen.push((s, v.clone()));
                    if hit {
                        return v;
                    }
                }
                Ok(None) => panic!("event subscription closed while waiting for {what}"),
                Err(_) => panic!(
                    "timed out after {timeout:?} waiting for {what}; saw {} messages:\n{}",
                    self.seen.len(),
                    self.seen.iter().map(|(s, v)| format!("{s} {v}")).collect::<Vec<_>>().join("\n")
                ),
            }
        }
    }

    /// Waits until `n` messages matching `pred` have been seen in total.
    pub async fn until_count(&mut self, timeout: Duration, n: usize, what: &str, pred: impl Fn(&str, &Value) -> bool) {
        let deadline = tokio::time::Instant::now() + timeout;
        // Counted once, then only each new message is tested: linear in the
        // messages seen, for the tests that wait for thousands of events.
        let mut count = self.seen.iter().filter(|(s, v)| pred(s, v)).count();
        while count < n {
            match tokio::time::timeout_at(deadline, self.rx.recv()).await {
                Ok(Some(m)) => {
                    count += usize::from(pred(&m.0, &m.1));
                    self.seen.push(m);
                }
                Ok(None) => panic!("event subscription closed while waiting for {what}"),
                Err(_) => panic!("timed out after {timeout:?} waiting for {n} × {what}; saw {count}"),
            }
        }
    }

    /// Waits for the job's terminal event (`completed`, `failed`, `cancelled`).
    pub async fn job_end(&mut self, timeout: Duration) -> Value {
        self.until(timeout, "the job to end", |s, v| {
            s.ends_with(".event") && matches!(v["event"].as_str(), Some("completed" | "failed" | "cancelled"))
        })
        .await
    }

    /// Drains whatever has arrived without waiting.
    pub fn drain(&mut self) {
        while let Ok(m) = self.rx.try_recv() {
            self.seen.push(m);
        }
    }

    /// Seen messages whose subject ends with `suffix_kind` (e.g. ".event") and
    /// whose `event` field is `event`.
    pub fn events(&self, event: &str) -> Vec<&Value> {
        self.seen.iter().filter(|(_, v)| v["event"] == event).map(|(_, v)| v).collect()
    }
}
