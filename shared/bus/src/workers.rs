//! The live set of workers: each worker's latest [`WorkerHeartbeat`] in the
//! `<prefix>_workers` KV bucket, one entry per served type keyed
//! `<type>.<worker token>` ([`Subjects::worker_key`]).
//!
//! Why per type: a worker credential may write only under its own type
//! (`$KV.<bucket>.<type>.*` and `<prefix>.worker.heartbeat.<type>.*`,
//! deploy/nats/roles.conf), so a credential of one type cannot claim to
//! serve another or overwrite another type's workers. Readers take an entry
//! only when its body matches its key (the worker's token, and the key's
//! type as its only type), then merge a worker's entries back into one
//! heartbeat: a forged or old-format entry (key without a type, from a
//! worker of an earlier version) is skipped with a warning.
//!
//! Every entry is written with a per-message TTL (the `Nats-TTL` header,
//! NATS >= 2.11) of three of that worker's own heartbeat intervals, so expiry
//! is decided by the server's clock and each worker's own interval: a worker
//! killed without a goodbye drops out of the set within three intervals, with
//! no clock comparison between hosts and no sweeper process.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;

use futures::TryStreamExt;

use crate::{Bus, BusError};
use flotilla_protocol::ids::SubagentType;
use flotilla_protocol::subjects::Subjects;
use flotilla_protocol::{self as protocol, WorkerHeartbeat};

/// Entries live this many heartbeat intervals.
pub const TTL_INTERVALS: u32 = 3;

impl Bus {
    /// Publishes `hb` once per served type, each beat carrying that type's
    /// load only: on `<prefix>.worker.heartbeat.<type>.<worker>` for
    /// subscribers, and as the worker's entry for that type, expiring after
    /// [`TTL_INTERVALS`] × `hb.interval_ms`.
    pub async fn publish_heartbeat(&self, hb: &WorkerHeartbeat) -> Result<(), BusError> {
        let token = Subjects::worker_token(&hb.worker_id);
        let ttl = (hb.interval_ms * TTL_INTERVALS as u64).div_ceil(1000).max(1);
        for load in &hb.types {
            let beat = WorkerHeartbeat { types: vec![load.clone()], ..hb.clone() };
            self.publish_event(self.subjects.heartbeat(&load.subagent_type, &token), &beat).await;
            let mut headers = async_nats::HeaderMap::new();
            headers.insert(async_nats::header::NATS_MESSAGE_TTL, ttl.to_string().as_str());
            let key = Subjects::worker_key(&load.subagent_type, &hb.worker_id);
            let subject = format!("$KV.{}.{key}", self.subjects.workers_bucket());
            self.js
                .publish_with_headers(subject.clone(), headers, protocol::encode(&beat).into())
                .await
                .map_err(|e| BusError::new(format!("cannot store heartbeat on {subject}"), e))?
                .await
                .map_err(|e| BusError::new(format!("heartbeat not stored on {subject}"), e))?;
        }
        Ok(())
    }

    /// Removes a worker's entries for `types` (on a clean shutdown, once its
    /// tasks are done).
    pub async fn remove_worker(&self, worker_id: &str, types: &[SubagentType]) -> Result<(), BusError> {
        let store = self.workers_bucket().await?;
        for ty in types {
            store
                .delete(Subjects::worker_key(ty, worker_id))
                .await
                .map_err(|e| BusError::new(format!("cannot remove worker {worker_id} ({ty})"), e))?;
        }
        Ok(())
    }

    /// The latest heartbeat of every live worker (its entries of every type
    /// merged), sorted by worker id. Undecodable entries (another schema
    /// version) and entries whose body does not match their key are skipped
    /// with a warning.
    pub async fn live_workers(&self) -> Result<Vec<WorkerHeartbeat>, BusError> {
        let store = self.workers_bucket().await?;
        let keys: Vec<String> = store
            .keys()
            .await
            .map_err(|e| BusError::new("cannot list workers", e))?
            .try_collect()
            .await
            .map_err(|e| BusError::new("cannot list workers", e))?;
        let mut workers: BTreeMap<String, WorkerHeartbeat> = BTreeMap::new();
        for key in keys {
            let bytes = match store.get(&key).await {
                Ok(Some(b)) => b,
                Ok(None) => continue, // expired between listing and reading
                Err(e) => return Err(BusError::new(format!("cannot read worker {key}"), e)),
            };
            let hb = match protocol::decode::<WorkerHeartbeat>(&bytes) {
                Ok(hb) => hb,
                Err(e) => {
                    tracing::warn!(worker = %key, error = %e, "unreadable heartbeat skipped");
                    continue;
                }
            };
            if let Err(why) = matches_key(&key, &hb) {
                tracing::warn!(worker = %key, "heartbeat skipped: {why}");
                continue;
            }
            match workers.entry(hb.worker_id.clone()) {
                Entry::Vacant(v) => {
                    v.insert(hb);
                }
                Entry::Occupied(mut o) => merge(o.get_mut(), hb),
            }
        }
        Ok(workers.into_values().collect())
    }
}

/// Whether the entry `key` may hold `hb`: the key is `<type>.<token>` with
/// the token of `hb.worker_id` and `hb` names that one type only, so a
/// credential allowed under one type's keys can speak for no other type.
fn matches_key(key: &str, hb: &WorkerHeartbeat) -> Result<(), String> {
    let Some((ty, token)) = key.split_once('.') else {
        return Err("no subagent type in its key: a worker of an earlier version, whose beats are not accepted".into());
    };
    if token != Subjects::worker_token(&hb.worker_id) {
        return Err(format!("its body names worker {:?}, not the key's {token:?}", hb.worker_id));
    }
    match hb.types.as_slice() {
        [load] if load.subagent_type.as_str() == ty => Ok(()),
        types => {
            let named: Vec<&str> = types.iter().map(|t| t.subagent_type.as_str()).collect();
            Err(format!("its body names types {named:?}, not the key's {ty:?} alone"))
        }
    }
}

/// Folds `other`, one more type's beat of the same worker, into `into`:
/// the types add up; the newer beat's state and details win.
fn merge(into: &mut WorkerHeartbeat, other: WorkerHeartbeat) {
    let mut types = std::mem::take(&mut into.types);
    types.extend(other.types.iter().cloned());
    if other.at > into.at {
        *into = other;
    }
    types.sort_by(|a, b| a.subagent_type.cmp(&b.subagent_type));
    into.types = types;
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_protocol::TypeLoad;

    fn beat(worker: &str, types: &[&str]) -> WorkerHeartbeat {
        WorkerHeartbeat {
            v: 1,
            worker_id: worker.into(),
            host: "h".into(),
            pid: 1,
            version: "0".into(),
            state: Default::default(),
            types: types
                .iter()
                .map(|t| TypeLoad {
                    subagent_type: SubagentType::new(*t).unwrap(),
                    capacity: 2,
                    in_flight: 0,
                    completed: 0,
                    failed: 0,
                    cancelled: 0,
                    busy_ms: 0,
                })
                .collect(),
            mcp_servers: vec![],
            metrics_url: None,
            rss_bytes: None,
            started_at: protocol::now(),
            at: protocol::now(),
            interval_ms: 1000,
        }
    }

    #[test]
    fn an_entry_must_match_its_key() {
        assert_eq!(matches_key("finance.w_1", &beat("w.1", &["finance"])), Ok(()));
        let e = matches_key("finance.w_1", &beat("w.1", &["legal"])).unwrap_err();
        assert!(e.contains("legal"), "{e}");
        let e = matches_key("finance.w_1", &beat("w.1", &["finance", "legal"])).unwrap_err();
        assert!(e.contains("alone"), "{e}");
        let e = matches_key("finance.w_2", &beat("w.1", &["finance"])).unwrap_err();
        assert!(e.contains("w.1"), "{e}");
        let e = matches_key("w_1", &beat("w.1", &["finance"])).unwrap_err();
        assert!(e.contains("earlier version"), "{e}");
    }

    #[test]
    fn a_workers_types_merge_into_one_beat() {
        let mut a = beat("w1", &["legal"]);
        let mut b = beat("w1", &["finance"]);
        b.at = a.at + time::Duration::seconds(1);
        b.state = flotilla_protocol::WorkerState::Draining;
        merge(&mut a, b);
        let types: Vec<&str> = a.types.iter().map(|t| t.subagent_type.as_str()).collect();
        assert_eq!(types, ["finance", "legal"]);
        assert_eq!(a.state, flotilla_protocol::WorkerState::Draining, "the newer beat's state");
    }
}
