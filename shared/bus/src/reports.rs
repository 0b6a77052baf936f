//! The reports stream (`<prefix>_REPORTS`, kept 7 days): every task's final
//! report on `<prefix>.job.<tenant>.<job>.report.<task>`. One type publishes
//! (workers, and the orchestrator for tasks JetStream gave up on), looks up a
//! stored report (the planner on resume, the dead-letter watcher before it
//! writes a `failed` one) and follows new ones (the report router,
//! orchestrator/src/reports.rs).

use async_nats::jetstream::consumer::{DeliverPolicy, pull};
use futures::{Stream, StreamExt};

use crate::{Bus, BusError};
use flotilla_protocol::ids::{JobId, TaskId, Tenant};
use flotilla_protocol::{self as protocol, TaskReport};

/// The reports stream.
#[derive(Clone)]
pub struct ReportStream {
    bus: Bus,
}

impl Bus {
    /// The reports stream.
    pub fn reports(&self) -> ReportStream {
        ReportStream { bus: self.clone() }
    }
}

impl ReportStream {
    /// Stores `report` of a task of `tenant` and waits for the ack.
    /// `Nats-Msg-Id` is `report:<task>`, so a repeated publish of the same
    /// task's report inside the duplicate window is dropped.
    pub async fn publish(
        &self,
        tenant: &Tenant,
        report: &TaskReport,
        traceparent: Option<&str>,
    ) -> Result<(), BusError> {
        let subject = self.bus.subjects.report(tenant, &report.job_id, &report.task_id);
        let id = format!("report:{}", report.task_id);
        self.bus.publish_durable(subject, report, Some(&id), traceparent).await
    }

    /// The report stored for `task`, if any (the last one: a redelivered
    /// attempt may have written another). `None` too when the stream cannot
    /// be read or the report not decoded: callers then wait for a live one.
    pub async fn stored(&self, tenant: &Tenant, job: &JobId, task: &TaskId) -> Option<TaskReport> {
        let name = self.bus.subjects.reports_stream();
        let stream = self.bus.js.get_stream(&name).await.ok()?;
        let msg = stream.get_last_raw_message_by_subject(&self.bus.subjects.report(tenant, job, task)).await.ok()?;
        match protocol::decode(&msg.payload) {
            Ok(r) => Some(r),
            Err(e) => {
                tracing::warn!(%task, error = %e, "undecodable stored report ignored");
                None
            }
        }
    }

    /// Reports published from now on, of every job, as they are stored
    /// (an ordered consumer: no acks, recreated by the client on a gap).
    /// Undecodable reports are skipped with a warning.
    pub async fn follow(&self) -> Result<impl Stream<Item = TaskReport> + use<>, BusError> {
        let name = self.bus.subjects.reports_stream();
        let stream =
            self.bus.js.get_stream(&name).await.map_err(|e| BusError::new("cannot open the reports stream", e))?;
        let consumer = stream
            .create_consumer(pull::OrderedConfig {
                filter_subject: self.bus.subjects.all_reports(),
                deliver_policy: DeliverPolicy::New,
                ..Default::default()
            })
            .await
            .map_err(|e| BusError::new("cannot follow reports", e))?;
        let messages = consumer.messages().await.map_err(|e| BusError::new("cannot follow reports", e))?;
        Ok(messages.filter_map(|m| async move {
            let m = match m {
                Ok(m) => m,
                Err(e) => {
                    tracing::warn!(error = %e, "report stream hiccup");
                    return None;
                }
            };
            match protocol::decode::<TaskReport>(&m.payload) {
                Ok(r) => Some(r),
                Err(e) => {
                    tracing::warn!(error = %e, "undecodable report ignored");
                    None
                }
            }
        }))
    }

    /// Reports of `job` published from now on, live only (core NATS: nothing
    /// stored is replayed); for measuring dispatch-to-report latency.
    pub async fn live_of_job(
        &self,
        tenant: &Tenant,
        job: &JobId,
    ) -> Result<impl Stream<Item = TaskReport> + use<>, BusError> {
        let subject = format!("{}.job.{tenant}.{job}.report.*", self.bus.subjects.prefix());
        let sub = self
            .bus
            .client
            .subscribe(subject.clone())
            .await
            .map_err(|e| BusError::new(format!("cannot subscribe to {subject}"), e))?;
        Ok(sub.filter_map(|m| async move { protocol::decode::<TaskReport>(&m.payload).ok() }))
    }
}
