//! The in-memory record of one job this orchestrator runs, and the order of
//! its writes (docs/RELIABILITY.md, "Job records").
//!
//! The record is stored as two values ([`Doc`]): the small header, written on
//! every task transition, and the todo list, written only when it changes.
//! A change applies to the copy at once under a plain mutex never held across
//! an await, so readers (status requests, job events) never wait for a write.
//! Each change gets a version per value. At most one write of a value is in
//! flight per job; a change made meanwhile waits for it, then the next write
//! stores the newest copy, covering every change made so far (one write for
//! many changes under load). Each write is conditional on the revision the
//! last one stored (KV update-with-revision), so a copy never silently
//! overwrites a value someone else changed: a conflict re-reads the revision
//! and writes again. Nothing holds a lock across a retry.

use std::future::Future;

use bytes::Bytes;
use flotilla_bus::{BusError, Cas};
use flotilla_protocol::JobRecord;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// How many conflicts in a row a write rides out before giving up.
const MAX_CONFLICTS: u32 = 20;

/// Which stored value of the record a change touches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Doc {
    /// `<job>`: everything but the todos (and the input's tail).
    Header,
    /// `<job>.todos`.
    Todos,
}

/// One running job's record.
pub(super) struct Live {
    state: std::sync::Mutex<State>,
    /// Bumped whenever a write ends, to wake changes waiting for it.
    ended: watch::Sender<u64>,
    /// Fires when a value can no longer be stored (too large); the
    /// planner then fails the job (orchestrator/src/planner/mod.rs).
    pub(super) oversized: CancellationToken,
    /// The write error that fired it.
    pub(super) oversized_by: std::sync::Mutex<Option<String>>,
    /// The status this job is filed under in the job index; held while the
    /// entry moves, so moves of one job never interleave (jobs/index.rs).
    pub(super) indexed: tokio::sync::Mutex<flotilla_protocol::JobStatus>,
}

struct State {
    rec: JobRecord,
    header: Channel,
    todos: Channel,
}

impl State {
    fn channel(&mut self, doc: Doc) -> &mut Channel {
        match doc {
            Doc::Header => &mut self.header,
            Doc::Todos => &mut self.todos,
        }
    }
}

/// The writes of one stored value.
#[derive(Default)]
struct Channel {
    /// One more per change.
    version: u64,
    /// The newest version stored.
    written: u64,
    /// The KV revision of that write (0: not stored yet).
    revision: u64,
    /// Whether a write is in flight.
    writing: bool,
}

/// What one write attempt needs: the encoded value and the revision it replaces.
pub(super) struct Snapshot {
    pub payload: Bytes,
    pub revision: u64,
}

impl Live {
    /// `rec` as stored at these revisions of its header and todos (0: not stored yet).
    pub(super) fn new(rec: JobRecord, header: u64, todos: u64) -> Self {
        let indexed = tokio::sync::Mutex::new(rec.status);
        let state = State {
            rec,
            header: Channel { revision: header, ..Channel::default() },
            todos: Channel { revision: todos, ..Channel::default() },
        };
        Self {
            state: std::sync::Mutex::new(state),
            ended: watch::Sender::new(0),
            oversized: CancellationToken::new(),
            oversized_by: std::sync::Mutex::new(None),
            indexed,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic inside a change leaves a record that is still well-formed.
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(super) fn look<R>(&self, look: impl FnOnce(&JobRecord) -> R) -> R {
        look(&self.lock().rec)
    }

    /// Applies `change` to the part stored as `doc`; returns its result and
    /// that value's new version.
    pub(super) fn apply<R>(&self, doc: Doc, change: impl FnOnce(&mut JobRecord) -> R) -> (R, u64) {
        let mut st = self.lock();
        let out = change(&mut st.rec);
        let ch = st.channel(doc);
        ch.version += 1;
        (out, ch.version)
    }

    /// Makes sure a copy of `doc` at least as new as `version` is stored.
    /// `encode` makes the value from the record (under the lock: it may
    /// take fields out and put them back, never await); `write` stores one
    /// snapshot (retrying transient errors itself); `revision` reads the
    /// stored revision after a conflict.
    pub(super) async fn persist<E, W, WF, R, RF>(
        &self,
        doc: Doc,
        version: u64,
        encode: E,
        write: W,
        revision: R,
    ) -> Result<(), BusError>
    where
        E: Fn(&mut JobRecord) -> Bytes,
        W: Fn(Snapshot) -> WF,
        WF: Future<Output = Result<Cas, BusError>>,
        R: Fn() -> RF,
        RF: Future<Output = Result<u64, BusError>>,
    {
        let mut conflicts = 0;
        loop {
            let mut wake = self.ended.subscribe();
            let job = {
                let mut st = self.lock();
                let ch = st.channel(doc);
                if ch.written >= version {
                    return Ok(());
                }
                if ch.writing {
                    None
                } else {
                    ch.writing = true;
                    let (revision, at) = (ch.revision, ch.version);
                    Some((Snapshot { payload: encode(&mut st.rec), revision }, at))
                }
            };
            let Some((snapshot, at)) = job else {
                // Another change's write is in flight: it or the next one covers this change.
                let _ = wake.changed().await;
                continue;
            };
            let result = write(snapshot).await;
            let conflict = {
                let mut st = self.lock();
                let ch = st.channel(doc);
                ch.writing = false;
                match &result {
                    Ok(Cas::Stored(rev)) => {
                        ch.written = ch.written.max(at);
                        ch.revision = *rev;
                        false
                    }
                    Ok(Cas::Conflict) => true,
                    Err(_) => false,
                }
            };
            self.ended.send_modify(|n| *n += 1);
            result?;
            if conflict {
                conflicts += 1;
                if conflicts > MAX_CONFLICTS {
                    return Err(BusError::new(format!("cannot store the job's {doc:?}"), "it keeps changing"));
                }
                let stored = revision().await?;
                tracing::warn!(stored, ?doc, "job record changed by another writer; writing this copy over it");
                self.lock().channel(doc).revision = stored;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use flotilla_protocol::ids::{JobId, Tenant};
    use tokio::sync::oneshot;

    use super::*;

    type Stored = Arc<Mutex<Vec<String>>>;

    /// The value a test stores: the record's input.
    fn input(r: &mut JobRecord) -> Bytes {
        Bytes::from(r.input.clone())
    }

    /// Persists `version` of `live`, recording each stored snapshot's input;
    /// the first write may hang on `gate` until the test releases it.
    fn persist(
        live: &Arc<Live>,
        version: u64,
        stored: &Stored,
        gate: Option<(oneshot::Sender<()>, oneshot::Receiver<()>)>,
    ) -> tokio::task::JoinHandle<Result<(), BusError>> {
        let (live, stored) = (live.clone(), stored.clone());
        let gate = Arc::new(Mutex::new(gate));
        tokio::spawn(async move {
            let write = |s: Snapshot| {
                let (stored, gate) = (stored.clone(), gate.lock().unwrap().take());
                async move {
                    if let Some((started, release)) = gate {
                        started.send(()).unwrap();
                        release.await.unwrap();
                    }
                    let mut v = stored.lock().unwrap();
                    v.push(String::from_utf8(s.payload.to_vec()).unwrap());
                    Ok(Cas::Stored(v.len() as u64))
                }
            };
            live.persist(Doc::Header, version, input, write, || async { Ok(0) }).await
        })
    }

    #[tokio::test]
    async fn a_slow_write_blocks_no_reader_and_the_newest_copy_is_stored_last() {
        let live = Arc::new(Live::new(JobRecord::new(JobId::new(), Tenant::default(), "submitted".into()), 1, 0));
        let stored = Stored::default();
        let set = |to: &'static str| move |r: &mut JobRecord| r.input = to.into();

        // A write that hangs (a NATS outage) until the test releases it.
        let ((), a) = live.apply(Doc::Header, set("a"));
        let (started, on_start) = oneshot::channel();
        let (release, on_release) = oneshot::channel();
        let slow = persist(&live, a, &stored, Some((started, on_release)));
        on_start.await.unwrap();

        // Meanwhile readers answer at once and changes apply.
        assert_eq!(live.look(|r| r.input.clone()), "a");
        let ((), b) = live.apply(Doc::Header, set("b"));
        let ((), c) = live.apply(Doc::Header, set("c"));
        assert_eq!(live.look(|r| r.input.clone()), "c");
        let later = [persist(&live, b, &stored, None), persist(&live, c, &stored, None)];

        release.send(()).unwrap();
        slow.await.unwrap().unwrap();
        for w in later {
            w.await.unwrap().unwrap();
        }
        // "b" was covered by the write of the newest copy: one write fewer,
        // and nothing older lands after "c".
        assert_eq!(*stored.lock().unwrap(), ["a", "c"]);
    }

    #[tokio::test]
    async fn a_conflict_rereads_the_revision_and_writes_again_and_a_permanent_error_is_returned_at_once() {
        let live = Live::new(JobRecord::new(JobId::new(), Tenant::default(), "x".into()), 3, 0);
        let ((), v) = live.apply(Doc::Header, |r| r.input = "y".into());
        let seen = Mutex::new(Vec::new());
        let write = |s: Snapshot| {
            seen.lock().unwrap().push(s.revision);
            let rev = s.revision;
            async move { Ok(if rev == 3 { Cas::Conflict } else { Cas::Stored(rev + 1) }) }
        };
        live.persist(Doc::Header, v, input, write, || async { Ok(7) }).await.unwrap();
        assert_eq!(*seen.lock().unwrap(), [3, 7], "retried on the revision read after the conflict");

        let ((), v) = live.apply(Doc::Header, |r| r.input = "z".into());
        let attempts = Mutex::new(0);
        let too_large = |_: Snapshot| {
            *attempts.lock().unwrap() += 1;
            async {
                Err(BusError::with_kind(
                    flotilla_bus::BusErrorKind::TooLarge,
                    "cannot store job",
                    "maximum payload exceeded",
                ))
            }
        };
        let err = live.persist(Doc::Header, v, input, too_large, || async { Ok(0) }).await.unwrap_err();
        assert_eq!(err.kind(), flotilla_bus::BusErrorKind::TooLarge);
        assert_eq!(*attempts.lock().unwrap(), 1);
    }
}
