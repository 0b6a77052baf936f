//! The approvals KV bucket (`<prefix>_approvals`): one [`ApprovalRecord`] per
//! gated tool call under `req.<type>.<job>.<task>.<call>`, written by the
//! worker of that type, and at most one [`DecisionRecord`] per round of it
//! under `dec.<type>.<job>.<task>.<call>.<round>`, written only by the
//! orchestrator. The split is what lets NATS permissions enforce who decides:
//! a worker credential may write `req.<its type>.>` and only read
//! `dec.<its type>.>` (`deploy/nats/roles.conf`, docs/SECURITY.md).
//!
//! A decision key is created once (create-if-absent), and a request's state
//! changes are compare-and-set on its revision. Both keys live in one stream,
//! so their revisions are one total order: when a worker's expiry and a
//! reviewer's decision race, the lower revision wins on both sides (see
//! `workers/src/approval.rs` and `orchestrator/src/approvals.rs`). Entries
//! outlive the task (so a redelivered task finds its decided calls) and expire
//! with the bucket's `max_age` of seven days.

use std::time::Duration;

use async_nats::jetstream::kv::{self, CreateErrorKind, Operation, UpdateErrorKind};
use futures::{Stream, StreamExt, TryStreamExt};

use crate::{Bus, BusError};
use flotilla_protocol::ids::{JobId, SubagentType, TaskId};
use flotilla_protocol::{self as protocol, ApprovalRecord, DecisionRecord};

/// How long an approval record is kept.
pub const APPROVAL_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);

/// A record and the KV revision it was read at (for compare-and-set).
#[derive(Clone, Debug)]
pub struct Versioned {
    /// The record.
    pub record: ApprovalRecord,
    /// Its revision.
    pub revision: u64,
}

/// The outcome of a compare-and-set write.
#[derive(Debug)]
pub enum Write {
    /// Stored at this revision.
    Stored(u64),
    /// Someone else wrote first: re-read and decide again.
    Conflict,
}

/// Typed access to the approvals bucket.
#[derive(Clone)]
pub struct ApprovalStore {
    kv: kv::Store,
    bus: Bus,
}

impl Bus {
    /// The approvals bucket, declared when this process manages the topology,
    /// otherwise opened as declared by the orchestrator.
    pub async fn approvals(&self) -> Result<ApprovalStore, BusError> {
        let kv = self.approvals_bucket().await?;
        Ok(ApprovalStore { kv, bus: self.clone() })
    }
}

impl ApprovalStore {
    /// `req.<type>.<job>.<task>.<call>`: the request of one call. A call id
    /// made only of `A-Z a-z 0-9 - _` (at most 128 characters) is used as is;
    /// any other is replaced by `=` and its sha256, which keeps keys valid
    /// whatever a model puts in its call ids.
    pub fn key(ty: &SubagentType, job: &JobId, task: &TaskId, call_id: &str) -> String {
        let plain = !call_id.is_empty()
            && call_id.len() <= 128
            && call_id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if plain {
            format!("req.{ty}.{job}.{task}.{call_id}")
        } else {
            format!("req.{ty}.{job}.{task}.={}", flotilla_protocol::digest::sha256_hex(call_id.as_bytes()))
        }
    }

    /// The request key of `record`.
    pub fn key_of(record: &ApprovalRecord) -> String {
        let r = &record.request;
        Self::key(&r.subagent_type, &r.job_id, &r.task_id, &r.call_id)
    }

    /// `dec.<type>.<job>.<task>.<call>.<round>`: the decision of one round of
    /// the request under `key`.
    pub fn decision_key(key: &str, round: u32) -> String {
        format!("dec.{}.{round}", key.strip_prefix("req.").unwrap_or(key))
    }

    /// The decision stored under `key`, with its revision.
    pub async fn decision(&self, key: &str) -> Result<Option<(DecisionRecord, u64)>, BusError> {
        let entry = self.kv.entry(key).await.map_err(|e| BusError::new(format!("cannot read decision {key}"), e))?;
        match entry {
            Some(e) if e.operation == Operation::Put => Ok(Some((decode_decision(&e.key, &e.value)?, e.revision))),
            _ => Ok(None),
        }
    }

    /// Stores the one decision of a round: `Conflict` when it has one already.
    pub async fn create_decision(&self, key: &str, record: &DecisionRecord) -> Result<Write, BusError> {
        match self.kv.create(key, protocol::encode(record).into()).await {
            Ok(rev) => Ok(Write::Stored(rev)),
            Err(e) if e.kind() == CreateErrorKind::AlreadyExists => Ok(Write::Conflict),
            Err(e) => Err(BusError::new(format!("cannot store decision {key}"), e)),
        }
    }

    /// Waits for the decision under `key` (the stored one at once, if any).
    ///
    /// A named consumer filtered on exactly that key: the filter is part of
    /// the `$JS.API.CONSUMER.CREATE` subject, so a worker's permission can
    /// name the decision keys of its own type only.
    pub async fn watch_decision(
        &self,
        key: &str,
    ) -> Result<impl Stream<Item = Result<(DecisionRecord, u64), BusError>> + use<>, BusError> {
        use async_nats::jetstream::consumer::{DeliverPolicy, pull};
        let stream = format!("KV_{}", self.bus.subjects.approvals_bucket());
        let name = format!("decision-{}", uuid::Uuid::now_v7().simple());
        let api = format!("$JS.API.CONSUMER.CREATE.{stream}.{name}");
        let config = pull::OrderedConfig {
            name: Some(name),
            filter_subject: format!("$KV.{}.{key}", self.bus.subjects.approvals_bucket()),
            deliver_policy: DeliverPolicy::LastPerSubject,
            ..Default::default()
        };
        let create = self.bus.js.create_consumer_on_stream(config, &stream);
        let consumer =
            self.bus.guarded(format!("cannot watch decision {key}"), create, |d| d.subject.starts_with(&api)).await?;
        let messages =
            consumer.messages().await.map_err(|e| BusError::new(format!("cannot watch decision {key}"), e))?;
        let key = key.to_string();
        Ok(messages.filter_map(move |m| {
            let key = key.clone();
            async move {
                match m {
                    Ok(m) if m.payload.is_empty() => None, // a delete marker
                    Ok(m) => {
                        let revision = m.info().map(|i| i.stream_sequence).unwrap_or_default();
                        Some(decode_decision(&key, &m.payload).map(|d| (d, revision)))
                    }
                    Err(e) => Some(Err(BusError::new(format!("watch of decision {key} failed"), e))),
                }
            }
        }))
    }

    /// The record under `key`, if any.
    pub async fn get(&self, key: &str) -> Result<Option<Versioned>, BusError> {
        let entry = self.kv.entry(key).await.map_err(|e| BusError::new(format!("cannot read approval {key}"), e))?;
        match entry {
            Some(e) if e.operation == Operation::Put => Ok(Some(decode(&e)?)),
            _ => Ok(None),
        }
    }

    /// Stores a new record; `Conflict` when the key already exists.
    pub async fn create(&self, key: &str, record: &ApprovalRecord) -> Result<Write, BusError> {
        match self.kv.create(key, protocol::encode(record).into()).await {
            Ok(rev) => Ok(Write::Stored(rev)),
            Err(e) if e.kind() == CreateErrorKind::AlreadyExists => Ok(Write::Conflict),
            Err(e) => Err(BusError::new(format!("cannot store approval {key}"), e)),
        }
    }

    /// Replaces the record read at `revision`; `Conflict` when it changed since.
    pub async fn update(&self, key: &str, record: &ApprovalRecord, revision: u64) -> Result<Write, BusError> {
        match self.kv.update(key, protocol::encode(record).into(), revision).await {
            Ok(rev) => Ok(Write::Stored(rev)),
            Err(e) if e.kind() == UpdateErrorKind::WrongLastRevision => Ok(Write::Conflict),
            Err(e) => Err(BusError::new(format!("cannot update approval {key}"), e)),
        }
    }

    /// Every request record, or only `job`'s, in key order.
    pub async fn list(&self, job: Option<&JobId>) -> Result<Vec<Versioned>, BusError> {
        let job = job.map(|j| j.to_string());
        let mut keys: Vec<String> = self
            .kv
            .keys()
            .await
            .map_err(|e| BusError::new("cannot list approvals", e))?
            .try_collect()
            .await
            .map_err(|e| BusError::new("cannot list approvals", e))?;
        keys.retain(|k| {
            let mut parts = k.split('.');
            parts.next() == Some("req") && job.as_deref().is_none_or(|j| parts.nth(1) == Some(j))
        });
        keys.sort();
        let mut out = Vec::with_capacity(keys.len());
        for k in keys {
            if let Some(v) = self.get(&k).await? {
                out.push(v);
            }
        }
        Ok(out)
    }
}

fn decode_decision(key: &str, value: &[u8]) -> Result<DecisionRecord, BusError> {
    protocol::decode::<DecisionRecord>(value)
        .map_err(|err| BusError::new(format!("bad decision record under {key}"), err))
}

fn decode(e: &kv::Entry) -> Result<Versioned, BusError> {
    let record = protocol::decode::<ApprovalRecord>(&e.value)
        .map_err(|err| BusError::new(format!("bad approval record under {}", e.key), err))?;
    Ok(Versioned { record, revision: e.revision })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_valid_whatever_the_call_id() {
        let (job, task) = (JobId::new(), TaskId::new());
        let ty = SubagentType::new("ops").unwrap();
        let key = ApprovalStore::key(&ty, &job, &task, "call_0_1");
        assert_eq!(key, format!("req.ops.{job}.{task}.call_0_1"));
        assert_eq!(ApprovalStore::decision_key(&key, 2), format!("dec.ops.{job}.{task}.call_0_1.2"));
        for odd in ["call.1", "a b", "*", ">", "", &"x".repeat(200), "ü"] {
            let k = ApprovalStore::key(&ty, &job, &task, odd);
            let last = k.rsplit('.').next().unwrap();
            assert!(last.starts_with('=') && last.len() == 65, "{odd:?} -> {k}");
        }
        assert_ne!(ApprovalStore::key(&ty, &job, &task, "a b"), ApprovalStore::key(&ty, &job, &task, "a_b"));
    }
}
