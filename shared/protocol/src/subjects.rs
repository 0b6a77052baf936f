//! Every NATS subject, stream, consumer and bucket name Flotilla uses, built in
//! one place. Subjects are a public API (documented in `docs/PROTOCOL.md`):
//! change them here or nowhere.

use crate::ids::{JobId, SubagentType, TaskId, Tenant};

/// Builds names under one configurable prefix (default `flotilla`).
#[derive(Clone, Debug)]
pub struct Subjects {
    prefix: String,
}

impl Subjects {
    /// The prefix must be a valid subject token; config validation checks it.
    pub fn new(prefix: impl Into<String>) -> Self {
        Self { prefix: prefix.into() }
    }

    /// The prefix itself.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    fn upper(&self) -> String {
        self.prefix.to_ascii_uppercase().replace('-', "_")
    }

    /// `<p>.task.<type>.<job>`: a task message of `job` for subagent type `ty`.
    /// The job id in the subject lets a cancelled job's queued tasks be purged.
    pub fn task(&self, ty: &SubagentType, job: &JobId) -> String {
        format!("{}.task.{ty}.{job}", self.prefix)
    }
    /// `<p>.task.<type>.*`: every task of one subagent type (its consumer's filter).
    pub fn tasks_of_type(&self, ty: &SubagentType) -> String {
        format!("{}.task.{ty}.*", self.prefix)
    }
    /// `<p>.task.*.<job>`: every queued task of one job.
    pub fn tasks_of_job(&self, job: &JobId) -> String {
        format!("{}.task.*.{job}", self.prefix)
    }
    /// The subagent type token of a task subject (`<p>.task.<type>.<job>`),
    /// or `None` for any other shape.
    pub fn type_of_task<'a>(&self, subject: &'a str) -> Option<&'a str> {
        let rest = subject.strip_prefix(self.prefix.as_str())?.strip_prefix(".task.")?;
        match rest.split('.').collect::<Vec<_>>().as_slice() {
            [ty, _] => Some(ty),
            _ => None,
        }
    }
    /// `<p>.task.>`: every task subject (the tasks stream).
    pub fn all_tasks(&self) -> String {
        format!("{}.task.>", self.prefix)
    }
    /// `<p>.job.<tenant>.<job>.report.<type>.<task>`: the final report of a
    /// task of subagent type `ty`. Every job subject carries the tenant, so
    /// NATS permissions can confine a client to its own tenant's jobs; the
    /// type lets them confine a worker credential to reporting on its own
    /// type's tasks, and readers check it against the body
    /// ([`Self::ids_of_report`], docs/SECURITY.md).
    pub fn report(&self, tenant: &Tenant, job: &JobId, ty: &SubagentType, task: &TaskId) -> String {
        format!("{}.job.{tenant}.{job}.report.{ty}.{task}", self.prefix)
    }
    /// `<p>.job.*.*.report.*.*`: every report (the reports stream).
    pub fn all_reports(&self) -> String {
        format!("{}.job.*.*.report.*.*", self.prefix)
    }
    /// `<p>.job.<tenant>.<job>.report.*.*`: every report of one job.
    pub fn job_reports(&self, tenant: &Tenant, job: &JobId) -> String {
        format!("{}.job.{tenant}.{job}.report.*.*", self.prefix)
    }
    /// The job, type and task of a report subject
    /// (`<p>.job.<tenant>.<job>.report.<type>.<task>`), or `None` for any
    /// other shape or tokens that do not parse: a version 2 report body
    /// carries none of them (docs/PROTOCOL.md, "TaskReport").
    pub fn ids_of_report(&self, subject: &str) -> Option<(JobId, SubagentType, TaskId)> {
        let rest = subject.strip_prefix(self.prefix.as_str())?.strip_prefix(".job.")?;
        match rest.split('.').collect::<Vec<_>>().as_slice() {
            [_, job, "report", ty, task] => Some((job.parse().ok()?, SubagentType::new(*ty).ok()?, task.parse().ok()?)),
            _ => None,
        }
    }
    /// `<p>.job.<tenant>.<job>.progress.<task>`: progress events of a task.
    pub fn progress(&self, tenant: &Tenant, job: &JobId, task: &TaskId) -> String {
        format!("{}.job.{tenant}.{job}.progress.{task}", self.prefix)
    }
    /// The job and task of a progress subject
    /// (`<p>.job.<tenant>.<job>.progress.<task>`), or `None` for any other
    /// shape or ids that do not parse: a progress body carries neither
    /// (docs/PROTOCOL.md, "ProgressEvent").
    pub fn ids_of_progress(&self, subject: &str) -> Option<(JobId, TaskId)> {
        let rest = subject.strip_prefix(self.prefix.as_str())?.strip_prefix(".job.")?;
        match rest.split('.').collect::<Vec<_>>().as_slice() {
            [_, job, "progress", task] => Some((job.parse().ok()?, task.parse().ok()?)),
            _ => None,
        }
    }
    /// `<p>.job.<tenant>.<job>.event`: job-level events.
    pub fn job_event(&self, tenant: &Tenant, job: &JobId) -> String {
        format!("{}.job.{tenant}.{job}.event", self.prefix)
    }
    /// `<p>.job.<tenant>.<job>.approval.<task>`: approval requests of a task's tool calls.
    pub fn approval(&self, tenant: &Tenant, job: &JobId, task: &TaskId) -> String {
        format!("{}.job.{tenant}.{job}.approval.{task}", self.prefix)
    }
    /// `<p>.job.*.*.approval.*`: every approval request.
    pub fn all_approvals(&self) -> String {
        format!("{}.job.*.*.approval.*", self.prefix)
    }
    /// `<p>.job.<tenant>.<job>.message.<type>.<task>`: follow-up messages to a
    /// running task of subagent type `ty` (`message_task`), kept in
    /// [`Self::task_messages_stream`]. The type lets NATS permissions confine
    /// a worker credential to its own type's follow-ups (docs/SECURITY.md).
    pub fn task_message(&self, tenant: &Tenant, job: &JobId, ty: &SubagentType, task: &TaskId) -> String {
        format!("{}.job.{tenant}.{job}.message.{ty}.{task}", self.prefix)
    }
    /// `<p>.job.*.*.message.<type>.*`: the follow-up messages to every task
    /// of `ty`, of every tenant (what one worker of the type follows).
    pub fn task_messages_of_type(&self, ty: &SubagentType) -> String {
        format!("{}.job.*.*.message.{ty}.*", self.prefix)
    }
    /// `<p>.job.*.*.message.*.*`: every follow-up message (the messages stream).
    pub fn all_task_messages(&self) -> String {
        format!("{}.job.*.*.message.*.*", self.prefix)
    }
    /// `<p>.journal.<type>.<tenant>.<job>.<task>`: the step journal of a
    /// subagent task (its snapshot: the same plus `.snapshot`), readable and
    /// writable by workers of `ty` only (docs/RELIABILITY.md).
    pub fn journal(&self, ty: &SubagentType, tenant: &Tenant, job: &JobId, task: &TaskId) -> String {
        format!("{}.journal.{ty}.{tenant}.{job}.{task}", self.prefix)
    }
    /// `<p>.journal.*.<tenant>.<job>.>`: the journals of one job's tasks.
    pub fn journals_of_job(&self, tenant: &Tenant, job: &JobId) -> String {
        format!("{}.journal.*.{tenant}.{job}.>", self.prefix)
    }
    /// `<p>.journal.>`: every step journal (the journal stream).
    pub fn all_journals(&self) -> String {
        format!("{}.journal.>", self.prefix)
    }
    /// `<p>.job.<tenant>.<job>.>`: everything about one job.
    pub fn job_all(&self, tenant: &Tenant, job: &JobId) -> String {
        format!("{}.job.{tenant}.{job}.>", self.prefix)
    }
    /// `<p>.job.<tenant>.>`: everything about one tenant's jobs.
    pub fn tenant_jobs(&self, tenant: &Tenant) -> String {
        format!("{}.job.{tenant}.>", self.prefix)
    }
    /// `<p>.job.<tenant>.*.event`: the job-level events of one tenant's jobs.
    pub fn tenant_job_events(&self, tenant: &Tenant) -> String {
        format!("{}.job.{tenant}.*.event", self.prefix)
    }
    /// `<p>.job.>`: everything about every job.
    pub fn all_jobs(&self) -> String {
        format!("{}.job.>", self.prefix)
    }
    /// `<p>.job.*.*.event`: every job-level event.
    pub fn all_job_events(&self) -> String {
        format!("{}.job.*.*.event", self.prefix)
    }
    /// `<p>.job.*.*.event` and `<p>.job.*.*.progress.*`: what the events stream keeps.
    pub fn all_events(&self) -> Vec<String> {
        vec![self.all_job_events(), format!("{}.job.*.*.progress.*", self.prefix)]
    }
    /// `<p>.api.<tenant>.<op>`: job control by request/reply. The tenant is
    /// part of the subject so NATS permissions can confine a client to its own
    /// tenant's API (see docs/SECURITY.md); the orchestrator trusts only this.
    pub fn api(&self, tenant: &Tenant, op: &str) -> String {
        format!("{}.api.{tenant}.{op}", self.prefix)
    }
    /// `<p>.api.*.*`: every tenant's API operations.
    pub fn api_all(&self) -> String {
        format!("{}.api.*.*", self.prefix)
    }
    /// `<p>.worker.heartbeat.<type>.<worker>`: liveness of `worker` (a
    /// [`Self::worker_token`]) as a server of subagent type `ty`; a worker
    /// serving several types beats once per type. The type lets NATS
    /// permissions confine a worker credential to its own type's namespace,
    /// and readers reject a beat whose body names another worker or type
    /// (docs/SECURITY.md).
    pub fn heartbeat(&self, ty: &SubagentType, worker: &str) -> String {
        format!("{}.worker.heartbeat.{ty}.{worker}", self.prefix)
    }
    /// `<p>.worker.heartbeat.*.*`
    pub fn all_heartbeats(&self) -> String {
        format!("{}.worker.heartbeat.*.*", self.prefix)
    }
    /// KV bucket holding the latest heartbeat of each live worker and type
    /// (entries expire), keyed [`Self::worker_key`].
    pub fn workers_bucket(&self) -> String {
        format!("{}_workers", self.prefix)
    }
    /// `<type>.<worker token>`: the key of one worker's entry for one type
    /// in [`Self::workers_bucket`] (its write subject
    /// `$KV.<bucket>.<type>.<worker>` is what NATS permissions scope).
    pub fn worker_key(ty: &SubagentType, worker_id: &str) -> String {
        format!("{ty}.{}", Self::worker_token(worker_id))
    }
    /// A worker id as one subject token and KV key: characters outside
    /// `a-z A-Z 0-9 - _` (such as the dots of a host name) become `_`.
    pub fn worker_token(worker_id: &str) -> String {
        let t: String = worker_id
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' })
            .collect();
        if t.is_empty() { "_".into() } else { t }
    }

    /// `<p>.audit.<tenant>.<job>`: audit records of one job's tool calls and
    /// approvals. The tenant is in the subject so read access to the audit
    /// stream can be granted per tenant (docs/SECURITY.md).
    pub fn audit(&self, tenant: &Tenant, job: &JobId) -> String {
        format!("{}.audit.{tenant}.{job}", self.prefix)
    }
    /// `<p>.audit.*.<job>`: the audit records of one job, whatever its tenant.
    pub fn audit_of_job(&self, job: &JobId) -> String {
        format!("{}.audit.*.{job}", self.prefix)
    }
    /// `<p>.audit.>`: every audit record (the audit stream).
    pub fn all_audit(&self) -> String {
        format!("{}.audit.>", self.prefix)
    }
    /// JetStream stream of audit records (limits retention, `[nats] audit_retention_days`).
    pub fn audit_stream(&self) -> String {
        format!("{}_AUDIT", self.upper())
    }

    /// `<p>.deadletter.<what>`: messages that could not be processed, with the reason
    /// in the `Flotilla-Reason` header.
    pub fn dead_letter(&self, what: &str) -> String {
        format!("{}.deadletter.{what}", self.prefix)
    }
    /// `<p>.deadletter.task.<type>`: a task of subagent type `ty` given up on
    /// (or undecodable), so each type's dead letters can be counted apart.
    pub fn dead_letter_task(&self, ty: &SubagentType) -> String {
        format!("{}.deadletter.task.{ty}", self.prefix)
    }
    /// `<p>.deadletter.task.*`: the dead-lettered tasks of every type.
    pub fn dead_letter_tasks(&self) -> String {
        format!("{}.deadletter.task.*", self.prefix)
    }
    /// The subagent type token of a [`Self::dead_letter_task`] subject.
    pub fn type_of_dead_letter_task<'a>(&self, subject: &'a str) -> Option<&'a str> {
        let ty = subject.strip_prefix(self.prefix.as_str())?.strip_prefix(".deadletter.task.")?;
        (!ty.is_empty() && !ty.contains('.')).then_some(ty)
    }
    /// `<p>.deadletter.>`
    pub fn all_dead_letters(&self) -> String {
        format!("{}.deadletter.>", self.prefix)
    }
    /// JetStream stream of dead letters.
    pub fn dead_letter_stream(&self) -> String {
        format!("{}_DEADLETTER", self.upper())
    }

    /// JetStream stream of task messages (WorkQueue retention).
    pub fn tasks_stream(&self) -> String {
        format!("{}_TASKS", self.upper())
    }
    /// JetStream stream of task reports (durable for the planner).
    pub fn reports_stream(&self) -> String {
        format!("{}_REPORTS", self.upper())
    }
    /// JetStream stream of follow-up messages to running tasks (limits
    /// retention): a message sent before the worker subscribed is replayed.
    pub fn task_messages_stream(&self) -> String {
        format!("{}_MESSAGES", self.upper())
    }
    /// JetStream stream of subagent step journals (resume after a crash).
    pub fn journal_stream(&self) -> String {
        format!("{}_JOURNAL", self.upper())
    }
    /// JetStream stream of job events and progress (replay for `watch`).
    pub fn events_stream(&self) -> String {
        format!("{}_EVENTS", self.upper())
    }
    /// The durable consumer shared by every worker serving `ty`.
    pub fn task_consumer(&self, ty: &SubagentType) -> String {
        format!("{}-task-{ty}", self.prefix)
    }
    /// The subagent type of a [`Self::task_consumer`] name, or `None` for
    /// another consumer of the tasks stream.
    pub fn type_of_task_consumer<'a>(&self, name: &'a str) -> Option<&'a str> {
        name.strip_prefix(self.prefix.as_str())?.strip_prefix("-task-").filter(|ty| !ty.is_empty())
    }
    /// KV bucket of planner checkpoints (conversation per running job).
    pub fn checkpoints_bucket(&self) -> String {
        format!("{}_checkpoints", self.prefix)
    }
    /// KV bucket of job leases: which orchestrator plans which job.
    pub fn leases_bucket(&self) -> String {
        format!("{}_leases", self.prefix)
    }
    /// KV bucket of cancelled jobs, watched by every worker.
    pub fn cancelled_bucket(&self) -> String {
        format!("{}_cancelled", self.prefix)
    }
    /// `$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.<tasks stream>.*`: tasks given up by JetStream.
    pub fn max_deliveries_advisory(&self) -> String {
        format!("$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.{}.*", self.tasks_stream())
    }
    /// KV bucket of job records.
    pub fn jobs_bucket(&self) -> String {
        format!("{}_jobs", self.prefix)
    }
    /// KV bucket of approval records, keyed `<job>.<task>.<call>`.
    pub fn approvals_bucket(&self) -> String {
        format!("{}_approvals", self.prefix)
    }
    /// KV bucket of OAuth credentials from `flotilla mcp login`, keyed by MCP server name.
    pub fn mcp_tokens_bucket(&self) -> String {
        format!("{}_mcp_tokens", self.prefix)
    }
    /// Object Store bucket of job files (objects named `<job>/<base64url(path)>`).
    pub fn files_bucket(&self) -> String {
        format!("{}_files", self.prefix)
    }
}

impl Default for Subjects {
    fn default() -> Self {
        Self::new("flotilla")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_have_the_documented_shape() {
        let s = Subjects::default();
        let job: JobId = "0190c0de-0000-7000-8000-000000000001".parse().unwrap();
        let task: TaskId = "0190c0de-0000-7000-8000-000000000002".parse().unwrap();
        let ty = SubagentType::new("finance").unwrap();
        assert_eq!(s.task(&ty, &job), format!("flotilla.task.finance.{job}"));
        assert_eq!(s.tasks_of_type(&ty), "flotilla.task.finance.*");
        let acme = Tenant::new("acme").unwrap();
        assert_eq!(
            s.report(&acme, &job, &ty, &task),
            "flotilla.job.acme.0190c0de-0000-7000-8000-000000000001.report.finance.0190c0de-0000-7000-8000-000000000002"
        );
        assert_eq!(s.ids_of_report(&s.report(&acme, &job, &ty, &task)), Some((job, ty.clone(), task)));
        assert_eq!(s.ids_of_report(&format!("flotilla.job.acme.{job}.report.{task}")), None, "old shape");
        assert_eq!(s.ids_of_report(&format!("other.job.acme.{job}.report.finance.{task}")), None);
        assert_eq!(s.job_reports(&acme, &job), format!("flotilla.job.acme.{job}.report.*.*"));
        assert_eq!(s.job_event(&acme, &job), format!("flotilla.job.acme.{job}.event"));
        assert_eq!(s.ids_of_progress(&s.progress(&acme, &job, &task)), Some((job, task)));
        assert_eq!(s.ids_of_progress(&format!("flotilla.job.acme.{job}.progress.not-an-id")), None);
        assert_eq!(s.ids_of_progress(&s.job_event(&acme, &job)), None);
        assert_eq!(s.job_all(&acme, &job), format!("flotilla.job.acme.{job}.>"));
        assert_eq!(s.tenant_jobs(&acme), "flotilla.job.acme.>");
        assert_eq!(s.all_reports(), "flotilla.job.*.*.report.*.*");
        assert_eq!(s.api(&Tenant::default(), "submit"), "flotilla.api.default.submit");
        assert_eq!(s.approval(&acme, &job, &task), format!("flotilla.job.acme.{job}.approval.{task}"));
        assert_eq!(s.approvals_bucket(), "flotilla_approvals");
        assert_eq!(s.tasks_stream(), "FLOTILLA_TASKS");
        assert_eq!(s.task_consumer(&ty), "flotilla-task-finance");
        assert_eq!(s.type_of_task_consumer(&s.task_consumer(&ty)), Some("finance"));
        assert_eq!(s.type_of_task_consumer("someone-else"), None);
        assert_eq!(s.type_of_task(&s.task(&ty, &job)), Some("finance"));
        assert_eq!(s.type_of_task(&s.dead_letter_task(&ty)), None);
        assert_eq!(s.dead_letter_task(&ty), "flotilla.deadletter.task.finance");
        assert_eq!(s.type_of_dead_letter_task(&s.dead_letter_task(&ty)), Some("finance"));
        assert_eq!(s.type_of_dead_letter_task("flotilla.deadletter.task"), None, "a dead letter of earlier versions");
        assert_eq!(s.dead_letter_tasks(), "flotilla.deadletter.task.*");
        assert_eq!(Subjects::new("my-app").tasks_stream(), "MY_APP_TASKS");
        assert_eq!(s.files_bucket(), "flotilla_files");
        assert_eq!(s.mcp_tokens_bucket(), "flotilla_mcp_tokens");
        assert_eq!(s.task_message(&acme, &job, &ty, &task), format!("flotilla.job.acme.{job}.message.finance.{task}"));
        assert_eq!(s.all_task_messages(), "flotilla.job.*.*.message.*.*");
        assert_eq!(s.heartbeat(&ty, "w-1"), "flotilla.worker.heartbeat.finance.w-1");
        assert_eq!(s.all_heartbeats(), "flotilla.worker.heartbeat.*.*");
        assert_eq!(Subjects::worker_key(&ty, "host.a-1"), "finance.host_a-1");
        assert_eq!(s.task_messages_stream(), "FLOTILLA_MESSAGES");
        assert_eq!(s.workers_bucket(), "flotilla_workers");
        assert_eq!(Subjects::worker_token("host.example.com-12"), "host_example_com-12");
    }
}
