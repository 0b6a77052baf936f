//! The dead-letter stream (`<prefix>_DEADLETTER`, kept 30 days): messages no
//! process could handle (undecodable tasks, tasks JetStream gave up on),
//! stored on `<prefix>.deadletter.<what>` with the reason in the
//! [`REASON`] header, so nothing accepted vanishes silently. Tasks go on
//! `<prefix>.deadletter.task.<type>`, so each type's count is one stream
//! info away ([`TaskQueue::stats`](crate::TaskQueue::stats)).

use bytes::Bytes;

use crate::{Bus, REASON};
use flotilla_protocol::MAX_MESSAGE_BYTES;
use flotilla_protocol::ids::SubagentType;

impl Bus {
    /// Stores an unprocessable message on `<p>.deadletter.<what>` with the reason
    /// in a header, so nothing accepted vanishes silently.
    pub async fn dead_letter(&self, what: &str, payload: Bytes, reason: &str) {
        self.store_dead_letter(self.subjects.dead_letter(what), payload, reason).await
    }

    /// Stores a task of type `ty` no worker will run (given up on, or
    /// undecodable) on `<p>.deadletter.task.<type>`, with the reason.
    pub async fn dead_letter_task(&self, ty: &SubagentType, payload: Bytes, reason: &str) {
        self.store_dead_letter(self.subjects.dead_letter_task(ty), payload, reason).await
    }

    async fn store_dead_letter(&self, subject: String, payload: Bytes, reason: &str) {
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
}
