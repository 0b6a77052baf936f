//! The NATS side of the audit trail (docs/SECURITY.md#audit): the sink that
//! publishes every `AuditRecord` to `<prefix>.audit.<tenant>.<job>`, and the
//! reader behind `flotilla audit`. The records themselves and the `Auditor`
//! that writes them live in the agent crate (`audit`); the binaries plug this
//! sink into the agent's `AuditSink` port, so the bus needs no agent crate.

use std::sync::Arc;
use std::time::Duration;

use crate::{Bus, BusError};
use flotilla_protocol::{self as protocol, AuditRecord};

/// Publishes records to the audit stream.
pub struct BusAuditSink {
    bus: Bus,
}

impl BusAuditSink {
    /// A sink on `bus`.
    pub fn new(bus: Bus) -> Arc<Self> {
        Arc::new(Self { bus })
    }

    /// Publishes one record. Never fails the audited call: the publish is
    /// queued at once and the stream's ack awaited in the background; a
    /// missing ack is logged with the record's trace id.
    pub async fn write(&self, record: AuditRecord) {
        let subject = self.bus.subjects.audit(&record.tenant, &record.job_id);
        let trace_id = record.trace_id.clone().unwrap_or_else(|| "-".into());
        match self.bus.js.publish(subject.clone(), protocol::encode(&record).into()).await {
            Ok(ack) => {
                tokio::spawn(async move {
                    if let Err(e) = ack.await {
                        tracing::error!(%subject, %trace_id, error = %e, "audit record not stored");
                    }
                });
            }
            Err(e) => tracing::error!(%subject, %trace_id, error = %e, "audit record not published"),
        }
    }
}

/// Reads every stored audit record of `job` (of `tenant`), oldest first.
///
/// Uses a named ephemeral consumer filtered on `<prefix>.audit.<tenant>.<job>`:
/// the filter is part of the `$JS.API.CONSUMER.CREATE` subject, so NATS
/// permissions can let a tenant's credential read its own audit trail only.
pub async fn read(
    bus: &Bus,
    tenant: &flotilla_protocol::ids::Tenant,
    job: &flotilla_protocol::ids::JobId,
) -> Result<Vec<AuditRecord>, BusError> {
    use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, pull};
    use futures::StreamExt;

    let stream = bus.subjects.audit_stream();
    let filter = bus.subjects.audit(tenant, job);
    let name = format!("audit-{}", uuid::Uuid::now_v7().simple());
    let create = bus.js.create_consumer_on_stream(
        pull::Config {
            name: Some(name.clone()),
            filter_subject: filter.clone(),
            deliver_policy: DeliverPolicy::All,
            ack_policy: AckPolicy::None,
            inactive_threshold: bus.client_consumer_inactive(Duration::from_secs(30)),
            ..Default::default()
        },
        &stream,
    );
    let api = format!("$JS.API.CONSUMER.CREATE.{stream}.{name}");
    let consumer =
        bus.guarded(format!("cannot read the audit stream {stream}"), create, |d| d.subject.starts_with(&api)).await?;
    let total = consumer.cached_info().num_pending as usize;
    let (mut records, mut seen) = (Vec::with_capacity(total), 0);
    while seen < total {
        let batch = consumer
            .fetch()
            .max_messages(total - seen)
            .expires(Duration::from_secs(5))
            .messages()
            .await
            .map_err(|e| BusError::new(format!("cannot read {filter}"), e))?;
        let before = seen;
        let mut batch = std::pin::pin!(batch);
        while let Some(m) = batch.next().await {
            let m = m.map_err(|e| BusError::new(format!("cannot read {filter}"), e))?;
            seen += 1;
            match protocol::decode::<AuditRecord>(&m.payload) {
                Ok(r) => records.push(r),
                Err(e) => tracing::warn!(subject = %m.subject, error = %e, "unreadable audit record skipped"),
            }
        }
        if seen == before {
            return Err(BusError::new(format!("cannot read {filter}"), "the audit stream stopped delivering"));
        }
    }
    let _ = bus.js.delete_consumer_from_stream(&name, &stream).await;
    Ok(records)
}
