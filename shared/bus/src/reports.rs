//! The reports stream (`<prefix>_REPORTS`, kept 7 days): every task's final
//! report on `<prefix>.job.<tenant>.<job>.report.<type>.<task>`. The type
//! token is what NATS permissions scope per worker credential
//! (deploy/nats/roles.conf), so every reader here drops a report whose body
//! names another type than its subject (a forgery, or a report of an earlier
//! version on the type-less subject, which the stream no longer takes;
//! docs/PROTOCOL.md, "Reports"). One type publishes
//! (workers, and the orchestrator for tasks JetStream gave up on), looks up a
//! stored report (the planner on resume, the dead-letter watcher before it
//! writes a `failed` one) and follows new ones (the report router,
//! orchestrator/src/reports.rs).

use async_nats::jetstream::consumer::{DeliverPolicy, pull};
use futures::{Stream, StreamExt};

use crate::{Bus, BusError};
use flotilla_protocol::TaskReport;
use flotilla_protocol::ids::{JobId, SubagentType, TaskId, Tenant};

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
        let subject = self.bus.subjects.report(tenant, &report.job_id, &report.subagent_type, &report.task_id);
        let id = format!("report:{}", report.task_id);
        self.bus.publish_durable_bytes(subject, report.encode(), TaskReport::NAME, Some(&id), traceparent).await
    }

    /// The report stored for `task`, if any (the last one: a redelivered
    /// attempt may have written another). `None` too when the stream cannot
    /// be read or the report not decoded: callers then wait for a live one.
    pub async fn stored(&self, tenant: &Tenant, job: &JobId, ty: &SubagentType, task: &TaskId) -> Option<TaskReport> {
        let name = self.bus.subjects.reports_stream();
        let stream = self.bus.js.get_stream(&name).await.ok()?;
        let subject = self.bus.subjects.report(tenant, job, ty, task);
        let msg = stream.get_last_raw_message_by_subject(&subject).await.ok()?;
        self.checked(&subject, &msg.payload)
    }

    /// The report in `payload`, received on `subject`, when it decodes and
    /// its body, if it names a type, job or task (a version 1 body), names
    /// the subject's (the subject's type is the one whose credential may
    /// publish there); `None`, logged, otherwise.
    fn checked(&self, subject: &str, payload: &[u8]) -> Option<TaskReport> {
        let Some((job, ty, task)) = self.bus.subjects.ids_of_report(subject) else {
            tracing::warn!(%subject, "report refused: not on a typed report subject (a worker of an earlier version?)");
            return None;
        };
        let report = match TaskReport::decode(payload, job, &ty, task) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(%subject, error = %e, "undecodable report ignored");
                return None;
            }
        };
        if report.subagent_type != ty {
            tracing::warn!(%subject, task_id = %report.task_id, body_type = %report.subagent_type, subject_type = %ty,
                "report refused: its body names another subagent type than its subject");
            return None;
        }
        if (report.job_id, report.task_id) != (job, task) {
            tracing::warn!(%subject, body_job = %report.job_id, body_task = %report.task_id,
                "report refused: its body names another task than its subject");
            return None;
        }
        Some(report)
    }

    /// Reports published from now on, of every job, as they are stored
    /// (an ordered consumer: no acks, recreated by the client on a gap).
    /// Undecodable reports, and those whose body names another type than
    /// their subject, are skipped with a warning.
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
        let this = self.clone();
        Ok(messages.filter_map(move |m| {
            let this = this.clone();
            async move {
                let m = match m {
                    Ok(m) => m,
                    Err(e) => {
                        tracing::warn!(error = %e, "report stream hiccup");
                        return None;
                    }
                };
                this.checked(&m.subject, &m.payload)
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
        let subject = self.bus.subjects.job_reports(tenant, job);
        let sub = self
            .bus
            .client
            .subscribe(subject.clone())
            .await
            .map_err(|e| BusError::new(format!("cannot subscribe to {subject}"), e))?;
        let this = self.clone();
        Ok(sub.filter_map(move |m| {
            let report = this.checked(&m.subject, &m.payload);
            async move { report }
        }))
    }
}
