//! The bus: one NATS connection with JetStream, and the streams, consumers and
//! buckets every Flotilla process agrees on. Each process declares what it
//! needs idempotently at start (`create_or_update`), so the order in which
//! orchestrator and workers start does not matter.
//!
//! | name (prefix `flotilla`)   | kind                 | holds                                  |
//! |----------------------------|----------------------|----------------------------------------|
//! | `FLOTILLA_TASKS`           | stream, work queue   | `flotilla.task.>`                      |
//! | `flotilla-task-<type>`     | durable pull consumer| tasks of one subagent type             |
//! | `FLOTILLA_REPORTS`         | stream, limits 7 d   | `flotilla.job.*.report.*`              |
//! | `FLOTILLA_EVENTS`          | stream, limits 24 h  | `flotilla.job.*.event`, `.progress.*`  |
//! | `FLOTILLA_DEADLETTER`      | stream, limits 30 d  | `flotilla.deadletter.>` + reason header |
//! | `flotilla_jobs`            | KV bucket            | job records by job id                  |

use std::time::Duration;

use async_nats::jetstream::{self, consumer, kv, stream};
use bytes::Bytes;

use crate::config::NatsConfig;
use crate::ids::{SubagentType, Tenant};
use crate::protocol::{self, MAX_MESSAGE_BYTES, Message};
use crate::subjects::Subjects;

/// A bus operation failed.
#[derive(Debug, thiserror::Error)]
#[error("{context}: {source}")]
pub struct BusError {
    /// What was being done.
    pub context: String,
    /// The underlying error.
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

impl BusError {
    /// Wraps `source` with what was being done.
    pub fn new(context: impl Into<String>, source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self { context: context.into(), source: source.into() }
    }
}

/// Header carrying why a message was dead-lettered.
pub const REASON: &str = "Flotilla-Reason";

/// Header carrying the W3C trace context.
pub const TRACEPARENT: &str = "traceparent";

/// A connected process's view of the bus.
#[derive(Clone)]
pub struct Bus {
    /// Core NATS client (cheap to clone).
    pub client: async_nats::Client,
    /// JetStream context.
    pub js: jetstream::Context,
    /// Names under the configured prefix.
    pub subjects: Subjects,
    /// The `[nats]` settings.
    pub config: NatsConfig,
}

impl Bus {
    /// Connects as `name` (shown in `nats-server` connection lists), retrying
    /// for up to `wait` so processes may start before the server.
    pub async fn connect(config: &NatsConfig, name: &str, wait: Duration) -> Result<Self, BusError> {
        let deadline = tokio::time::Instant::now() + wait;
        let client = loop {
            let opts = async_nats::ConnectOptions::new()
                .name(name)
                .connection_timeout(Duration::from_secs(2))
                .max_reconnects(None);
            match opts.connect(config.url.as_str()).await {
                Ok(c) => break c,
                Err(e) if tokio::time::Instant::now() < deadline => {
                    tracing::debug!(error = %e, "NATS not reachable yet, retrying");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => {
                    return Err(BusError::new(
                        format!(
                            "cannot reach NATS at {} (is nats-server running? set [nats] url or FLOTILLA_NATS__URL)",
                            redact_url(&config.url)
                        ),
                        e,
                    ));
                }
            }
        };
        let js = jetstream::new(client.clone());
        Ok(Self { client, js, subjects: Subjects::new(&config.prefix), config: config.clone() })
    }

    /// Declares the streams and the jobs bucket (idempotent).
    pub async fn ensure_topology(&self) -> Result<(), BusError> {
        let s = &self.subjects;
        let streams = [
            stream::Config {
                name: s.tasks_stream(),
                subjects: vec![s.all_tasks()],
                retention: stream::RetentionPolicy::WorkQueue,
                storage: stream::StorageType::File,
                duplicate_window: Duration::from_secs(120),
                max_message_size: MAX_MESSAGE_BYTES as i32,
                ..Default::default()
            },
            stream::Config {
                name: s.reports_stream(),
                subjects: vec![s.all_reports()],
                storage: stream::StorageType::File,
                max_age: Duration::from_secs(7 * 24 * 3600),
                duplicate_window: Duration::from_secs(120),
                max_message_size: MAX_MESSAGE_BYTES as i32,
                ..Default::default()
            },
            stream::Config {
                name: s.events_stream(),
                subjects: s.all_events(),
                storage: stream::StorageType::File,
                max_age: Duration::from_secs(24 * 3600),
                max_message_size: MAX_MESSAGE_BYTES as i32,
                ..Default::default()
            },
            stream::Config {
                name: s.dead_letter_stream(),
                subjects: vec![s.all_dead_letters()],
                storage: stream::StorageType::File,
                max_age: Duration::from_secs(30 * 24 * 3600),
                ..Default::default()
            },
        ];
        for config in streams {
            let name = config.name.clone();
            self.js
                .create_or_update_stream(config)
                .await
                .map_err(|e| BusError::new(format!("cannot declare stream {name}"), e))?;
        }
        self.jobs().await?;
        Ok(())
    }

    /// The jobs KV bucket, created when missing.
    pub async fn jobs(&self) -> Result<kv::Store, BusError> {
        let bucket = self.subjects.jobs_bucket();
        self.js
            .create_or_update_key_value(kv::Config {
                bucket: bucket.clone(),
                history: 1,
                storage: stream::StorageType::File,
                max_value_size: MAX_MESSAGE_BYTES as i32,
                ..Default::default()
            })
            .await
            .map_err(|e| BusError::new(format!("cannot open KV bucket {bucket}"), e))
    }

    /// The durable pull consumer shared by every worker serving `ty`.
    pub async fn task_consumer(&self, ty: &SubagentType) -> Result<consumer::PullConsumer, BusError> {
        let name = self.subjects.task_consumer(ty);
        let stream = self.subjects.tasks_stream();
        self.js
            .create_consumer_on_stream(
                consumer::pull::Config {
                    durable_name: Some(name.clone()),
                    filter_subject: self.subjects.task(ty),
                    ack_policy: consumer::AckPolicy::Explicit,
                    ack_wait: Duration::from_secs(self.config.ack_wait),
                    max_deliver: self.config.max_deliver,
                    max_ack_pending: 10_000,
                    ..Default::default()
                },
                &stream,
            )
            .await
            .map_err(|e| BusError::new(format!("cannot declare consumer {name} on {stream}"), e))
    }

    /// Publishes `msg` through JetStream and waits for the stream's ack.
    /// `msg_id` becomes `Nats-Msg-Id` (deduplication within the window).
    pub async fn publish_durable<T: Message>(
        &self,
        subject: String,
        msg: &T,
        msg_id: Option<&str>,
        traceparent: Option<&str>,
    ) -> Result<(), BusError> {
        let payload = checked(protocol::encode(msg), T::NAME)?;
        let mut headers = async_nats::HeaderMap::new();
        if let Some(id) = msg_id {
            headers.insert(async_nats::header::NATS_MESSAGE_ID, id);
        }
        if let Some(tp) = traceparent {
            headers.insert(TRACEPARENT, tp);
        }
        self.js
            .publish_with_headers(subject.clone(), headers, payload)
            .await
            .map_err(|e| BusError::new(format!("cannot publish to {subject}"), e))?
            .await
            .map_err(|e| BusError::new(format!("no JetStream ack for {subject}"), e))?;
        Ok(())
    }

    /// Publishes an observation (progress, job event) without waiting for an
    /// ack: the events stream stores it, and losing one changes no result.
    pub async fn publish_event<T: Message>(&self, subject: String, msg: &T) {
        match checked(protocol::encode(msg), T::NAME) {
            Ok(payload) => {
                if let Err(e) = self.client.publish(subject.clone(), payload).await {
                    tracing::warn!(%subject, error = %e, "event not published");
                }
            }
            Err(e) => tracing::warn!(%subject, error = %e, "event not published"),
        }
    }

    /// Stores an unprocessable message on `<p>.deadletter.<what>` with the reason
    /// in a header, so nothing accepted vanishes silently.
    pub async fn dead_letter(&self, what: &str, payload: Bytes, reason: &str) {
        let subject = self.subjects.dead_letter(what);
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(REASON, reason.replace(['\r', '\n'], " ").as_str());
        let mut body = payload;
        body.truncate(MAX_MESSAGE_BYTES - 4096);
        match self.js.publish_with_headers(subject.clone(), headers, body).await {
            Ok(ack) => {
                if let Err(e) = ack.await {
                    tracing::error!(%subject, error = %e, reason, "dead letter not stored");
                }
            }
            Err(e) => tracing::error!(%subject, error = %e, reason, "dead letter not stored"),
        }
    }

    /// Request/reply on the job API with a timeout, decoding the typed reply.
    pub async fn request<Req: Message, Rep: Message>(
        &self,
        tenant: &Tenant,
        op: &str,
        req: &Req,
        timeout: Duration,
    ) -> Result<Rep, BusError> {
        let subject = self.subjects.api(tenant, op);
        let payload = checked(protocol::encode(req), Req::NAME)?;
        let reply = tokio::time::timeout(timeout, self.client.request(subject.clone(), payload))
            .await
            .map_err(|_| {
                BusError::new(
                    format!("no reply on {subject} within {}s", timeout.as_secs()),
                    "is `flotilla orchestrator` (or `flotilla up`) running against this NATS server?",
                )
            })?
            .map_err(|e| {
                let hint = if matches!(e.kind(), async_nats::RequestErrorKind::NoResponders) {
                    "no orchestrator is listening: start `flotilla orchestrator` or `flotilla up`"
                } else {
                    "request failed"
                };
                BusError::new(format!("{hint} ({subject})"), e)
            })?;
        protocol::decode(&reply.payload).map_err(|e| BusError::new(format!("bad reply on {subject}"), e))
    }
}

fn checked(payload: Bytes, what: &str) -> Result<Bytes, BusError> {
    if payload.len() > MAX_MESSAGE_BYTES {
        return Err(BusError::new(
            format!("{what} not sent"),
            format!("{} bytes exceeds the {} byte message limit", payload.len(), MAX_MESSAGE_BYTES),
        ));
    }
    Ok(payload)
}

/// Hides credentials in a URL for logs and errors: `nats://user:pass@h` -> `nats://***@h`.
pub fn redact_url(url: &str) -> String {
    url.split(',')
        .map(|u| match (u.find("://"), u.rfind('@')) {
            (Some(s), Some(at)) if at > s => format!("{}***{}", &u[..s + 3], &u[at..]),
            _ => u.to_string(),
        })
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    #[test]
    fn urls_lose_their_credentials() {
        assert_eq!(super::redact_url("nats://u:secret@h:4222"), "nats://***@h:4222");
        assert_eq!(super::redact_url("nats://h:4222,tls://t0k@x"), "nats://h:4222,tls://***@x");
    }
}
