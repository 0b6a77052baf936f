//! The dead-letter stream (`<prefix>_DEADLETTER`, kept 30 days): messages no
//! process could handle (undecodable tasks, tasks JetStream gave up on),
//! stored on `<prefix>.deadletter.<what>` with the reason in the
//! [`REASON`] header, so nothing accepted vanishes silently.

use bytes::Bytes;

use crate::{Bus, REASON};
use flotilla_protocol::MAX_MESSAGE_BYTES;

impl Bus {
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
}
