//! The job API on `<prefix>.api.<tenant>.<op>` (request/reply, docs/OPERATIONS.md):
//! the client side ([`Bus::request`], used by the CLI and tests) and the
//! serving side (the orchestrator's queue subscription and its replies,
//! orchestrator/src/service.rs).

use std::time::Duration;

use bytes::Bytes;

use crate::denials::{Denial, DenialKind, GuardError};
use crate::{Bus, BusError, BusErrorKind, checked};
use flotilla_protocol::ids::Tenant;
use flotilla_protocol::{self as protocol, Message};

/// The API requests of every tenant, delivered to one member of a queue group.
pub struct ApiRequests(async_nats::Subscriber);

impl ApiRequests {
    /// The next request; `None` once the subscription ended.
    pub async fn next(&mut self) -> Option<ApiRequest> {
        use futures::StreamExt;
        let m = self.0.next().await?;
        Some(ApiRequest { subject: m.subject.to_string(), payload: m.payload, reply_to: m.reply })
    }
}

/// One job-API request as it arrived: `<prefix>.api.<tenant>.<operation>`,
/// its payload, and the inbox its reply goes to ([`Bus::reply`]).
pub struct ApiRequest {
    /// The subject it was sent on.
    pub subject: String,
    /// The encoded request.
    pub payload: Bytes,
    reply_to: Option<async_nats::Subject>,
}

impl ApiRequest {
    /// Whether the sender waits for a reply (a plain publish does not).
    pub fn wants_reply(&self) -> bool {
        self.reply_to.is_some()
    }
}

impl Bus {
    /// Request/reply on the job API with a timeout, decoding the typed reply.
    pub async fn request<Req: Message, Rep: Message>(
        &self,
        tenant: &Tenant,
        op: &str,
        req: &Req,
        timeout: Duration,
    ) -> Result<Rep, BusError> {
        let subject = self.subjects.api(tenant, op);
        let payload = checked(protocol::encode(req).into(), Req::NAME)?;
        let call = async {
            Ok::<_, std::convert::Infallible>(
                tokio::time::timeout(timeout, self.client.request(subject.clone(), payload)).await,
            )
        };
        let inbox = format!("{}.", self.config.inbox_prefix);
        let concerns = |d: &Denial| match d.kind {
            DenialKind::Publish => d.subject == subject,
            DenialKind::Subscribe => d.subject.starts_with(&inbox),
        };
        let reply = match self.denials.guard(call, concerns).await {
            Ok(r) => r,
            Err(GuardError::Denied(d)) => return Err(BusError::new(format!("request on {subject} refused"), d)),
            Err(GuardError::Op(never)) => match never {},
        };
        let reply = reply
            .map_err(|_| {
                BusError::new(
                    format!("no reply on {subject} within {}s", timeout.as_secs()),
                    "is `flotilla orchestrator` (or `flotilla up`) running against this NATS server?",
                )
            })?
            .map_err(|e| {
                if matches!(e.kind(), async_nats::RequestErrorKind::NoResponders) {
                    // async-nats prints this one as "no responders: no responders"
                    // (its kind, then a source saying the same): the kind alone.
                    let hint = "no orchestrator is listening: start `flotilla orchestrator` or `flotilla up`";
                    BusError::with_kind(BusErrorKind::NoResponders, format!("{hint} ({subject})"), e.kind().to_string())
                } else {
                    BusError::new(format!("request failed ({subject})"), e)
                }
            })?;
        protocol::decode(&reply.payload).map_err(|e| BusError::new(format!("bad reply on {subject}"), e))
    }

    /// Subscribes to every tenant's API requests in queue group `queue`, so
    /// each request is answered by one orchestrator.
    pub async fn api_requests(&self, queue: &str) -> Result<ApiRequests, BusError> {
        let subject = self.subjects.api_all();
        self.client
            .queue_subscribe(subject.clone(), queue.to_string())
            .await
            .map(ApiRequests)
            .map_err(|e| BusError::new(format!("cannot subscribe to {subject}"), e))
    }

    /// Sends `payload` (an encoded reply) to `request`'s reply inbox; a
    /// request nobody waits for gets none. A reply larger than the server's
    /// max_payload (which the server would drop, leaving the client to time
    /// out) is replaced by a `limit` error reply that says so.
    pub async fn reply(&self, request: &ApiRequest, payload: Bytes) -> Result<(), BusError> {
        let Some(reply_to) = request.reply_to.clone() else {
            return Ok(());
        };
        let max = self.client.server_info().max_payload;
        let payload = if payload.len() > max { oversized_reply(payload.len(), max) } else { payload };
        self.client.publish(reply_to, payload).await.map_err(|e| BusError::new("API reply not sent", e))
    }
}

/// The error reply standing for a reply of `size` bytes over `max`.
fn oversized_reply(size: usize, max: usize) -> Bytes {
    let reply = protocol::ApiReply::<()>::error(
        protocol::ErrorKind::Limit,
        format!(
            "the reply ({size} bytes) exceeds the server's max_payload ({max} bytes): ask for a smaller page (list: limit, after; status: tasks_limit)"
        ),
    );
    protocol::encode(&reply).into()
}
