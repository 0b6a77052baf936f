//! The step journal of a subagent task (docs/RELIABILITY.md, "Step
//! journal"): every step the agent loop completes
//! ([`Step`]: a model turn, a tool result, the
//! follow-ups taken, a compaction snapshot) is appended to the task's journal
//! subject (shared/bus/src/journal.rs) and stored before the loop acts on
//! it. An attempt after the first folds the journal onto the task's first
//! conversation and continues at the next step, on whichever worker took it.
//!
//! Two markers besides steps: `handed_back`, written before a worker gives a
//! task back (drain, transient error), says why the next attempt resumes;
//! `resumed`, written by the attempt that resumes, fences the one before it:
//! steps an earlier attempt still appends after the marker's `upto` (a
//! worker that lost its task to `ack_wait` but still runs) are not folded by
//! later attempts, so the journal stays one line of history.
//!
//! What waits for the stream's ack: a model turn that calls a tool with
//! effects, before the calls run (so a resumed attempt replays the same
//! calls under the same idempotency keys), and every marker. A tool result
//! is published and its ack awaited just before the next entry goes out, so
//! the model call it feeds runs while the ack travels: the journal still
//! stores entries in the order the loop made them, and a worker lost before
//! the ack is the same as one lost just before the append (the tool runs
//! again, under the same key).
//!
//! Entries nothing needs before the loop goes on are appended behind, by a
//! chain of tasks of their own, each once the one before it and the tool
//! results' acks before it are in: the answering turn (the report is the
//! answer's record), and a turn whose calls are all read-only
//! ([`ToolSet::read_only`]: running one again has no effect, so no replay
//! key protects anything) with the tool results after it. The loop and the
//! report wait for none of them; the task is acked, or handed back, only
//! after [`StepJournal::settle`], so a later attempt finds them. A worker
//! lost before such an entry is stored is one lost just before its step,
//! as above: the model is asked again, or the read-only call runs again.
//!
//! The progress event of an awaited model turn that calls tools
//! (`model_call`) rides in its entry's header, and the stream republishes
//! it to the task's progress subject (shared/bus/src/journal.rs): one write
//! for the step and its event. That entry's ack is awaited before anything
//! after it goes out, so its republished event is in the events stream
//! before any event the worker publishes later. Every other event
//! (`tool_result`, the `model_call` of a turn appended behind) is published
//! on its own, in the loop's order on the worker's one connection, without
//! waiting for an ack: watchers see a task's events in the order the loop
//! made them, and the task's `finished` and its report wait for no entry of
//! the journal.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use flotilla_agent::agent::{Conversation, Step};
use flotilla_agent::model::ChatMessage;
use flotilla_agent::tool::ToolSet;
use flotilla_bus::{Appended, Bus, Journal, JournalKey, Stored, retry};
use flotilla_protocol::{self as protocol, Message, ProgressEvent, TaskMessage};
use serde::{Deserialize, Serialize};

/// How long an append may be retried (NATS restarting) before the task goes
/// on without it.
const APPEND_BUDGET: Duration = Duration::from_secs(5);

/// One journal message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JournalEntry {
    /// Schema version.
    #[serde(default = "protocol::schema_version")]
    pub v: u32,
    /// The attempt that wrote it.
    pub attempt: u32,
    /// What it records.
    #[serde(flatten)]
    pub record: Record,
}

impl Message for JournalEntry {
    const NAME: &'static str = "journal entry";
}

/// What a journal entry records. Tagged by `"entry"`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "entry", rename_all = "snake_case")]
pub enum Record {
    /// A completed step.
    Step {
        /// The step.
        step: Step,
    },
    /// The attempt gave the task back; the next one resumes for `reason`.
    HandedBack {
        /// `drained` or `transient_error`.
        reason: String,
    },
    /// The attempt resumed from the entries up to stream sequence `upto`.
    Resumed {
        /// Model turns completed before it.
        from_step: u32,
        /// Why the earlier attempt stopped.
        reason: String,
        /// The last entry it folded.
        upto: u64,
    },
}

impl Record {
    /// What the entry records, as logs name it: `model_turn`, `tool_result`,
    /// `inbox`, `note`, `snapshot`, `handed_back` or `resumed`.
    pub fn name(&self) -> &'static str {
        match self {
            Record::Step { step: Step::Turn { .. } } => "model_turn",
            Record::Step { step: Step::ToolResult { .. } } => "tool_result",
            Record::Step { step: Step::Inbox { .. } } => "inbox",
            Record::Step { step: Step::Note { .. } } => "note",
            Record::Step { step: Step::Snapshot { .. } } => "snapshot",
            Record::HandedBack { .. } => "handed_back",
            Record::Resumed { .. } => "resumed",
        }
    }
}

/// Where an attempt resumes.
#[derive(Debug)]
pub struct Resume {
    /// The rebuilt conversation.
    pub conversation: Conversation,
    /// Why the attempt before stopped (`worker_lost`, `drained`, `transient_error`).
    pub reason: String,
    /// Calls that had started with no recorded result.
    pub interrupted: usize,
}

/// A tool result's entry published whose ack is still awaited.
type Unacked = (JournalEntry, Appended);

/// The journal of one task attempt.
pub struct StepJournal {
    journal: Journal,
    key: JournalKey,
    attempt: u32,
    /// Whether entries carry their step's progress event (the stream
    /// republishes it), as it was when the attempt started
    /// ([`follow_carries_progress`]).
    carries_progress: bool,
    /// The type's tools: which calls are read-only (module docs).
    tools: Arc<ToolSet>,
    /// The model turns this attempt took over, once it resumed.
    resumed_from: std::sync::OnceLock<u32>,
    /// Tool results published whose acks are still awaited, in order.
    unacked: tokio::sync::Mutex<Vec<Unacked>>,
    /// The last task of the chain appending entries behind (module docs);
    /// each waits for the one before it, every awaited entry for the last.
    tail: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

/// How often a worker reads again whether the journal stream republishes:
/// an older orchestrator that restarts declares the stream without it, and
/// a worker that went on carrying events in entries would lose them for
/// as long as it did not notice.
pub const CARRIES_PROGRESS_CHECK: std::time::Duration = std::time::Duration::from_secs(10);

/// Whether the journal stream of `bus` republishes the progress events its
/// entries carry (module docs), read now and every [`CARRIES_PROGRESS_CHECK`]
/// until `stop` fires; tasks starting after a change write their entries
/// the new way. When it does not, or cannot be read, every event is
/// published on its own (logged when that starts and when it ends).
pub async fn follow_carries_progress(bus: &Bus, stop: tokio_util::sync::CancellationToken) -> Arc<AtomicBool> {
    let flag = Arc::new(AtomicBool::new(carries_progress(bus).await));
    log_carries_progress(flag.load(Ordering::Relaxed));
    let (bus, watched) = (bus.clone(), flag.clone());
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(CARRIES_PROGRESS_CHECK) => {}
                _ = stop.cancelled() => return,
            }
            let carries = carries_progress(&bus).await;
            if watched.swap(carries, Ordering::Relaxed) != carries {
                log_carries_progress(carries);
            }
        }
    });
    flag
}

async fn carries_progress(bus: &Bus) -> bool {
    bus.journal()
        .carries_progress()
        .await
        .map_err(|e| tracing::debug!(error = %e, "journal stream not read"))
        .unwrap_or(false)
}

fn log_carries_progress(carries: bool) {
    if carries {
        tracing::info!("the journal stream republishes progress events: each step's event rides in its entry");
    } else {
        tracing::warn!(
            "the journal stream does not republish progress events (declared by an older Flotilla, or unreadable): each step's event is published on its own"
        );
    }
}

impl StepJournal {
    /// The journal of `task`, written as `attempt`, whose type has `tools`;
    /// its entries carry their progress events when `carries_progress`
    /// ([`follow_carries_progress`]).
    pub fn new(bus: &Bus, task: &TaskMessage, attempt: u32, carries_progress: bool, tools: Arc<ToolSet>) -> Self {
        let journal = bus.journal();
        let key = journal.key(&task.subagent_type, &task.tenant, &task.job_id, &task.task_id);
        Self {
            journal,
            key,
            attempt,
            carries_progress,
            tools,
            resumed_from: Default::default(),
            unacked: Default::default(),
            tail: Default::default(),
        }
    }

    /// The model turns this attempt took over from earlier ones, if it resumed.
    pub fn resumed_from(&self) -> Option<u32> {
        self.resumed_from.get().copied()
    }

    /// Appends a completed step and waits until it is stored, except a tool
    /// result, the answering turn and a turn of read-only calls (module
    /// docs), with `event`, the step's progress event, in the entry when it
    /// is an awaited turn that calls tools and entries carry events.
    /// Whether the event went out with the entry: when not, the caller
    /// publishes it. A journal that cannot be written is logged and the
    /// task goes on: it loses only the resume point.
    pub async fn step(self: &Arc<Self>, step: &Step, event: Option<&ProgressEvent>) -> bool {
        let entry = self.entry(Record::Step { step: step.clone() });
        // None of these carries its event: it goes out right behind the entry.
        match step {
            Step::ToolResult { .. } => {
                self.append_result(entry).await;
                false
            }
            // The answering turn (no calls; nothing is appended behind it, so
            // its ack is not waited for) or a turn of read-only calls.
            Step::Turn { message: ChatMessage::Assistant { tool_calls, .. }, .. }
                if tool_calls.iter().all(|c| self.tools.read_only(&c.name)) =>
            {
                self.append_behind(entry, !tool_calls.is_empty()).await;
                false
            }
            Step::Turn { .. } => {
                let event = event.filter(|_| self.carries_progress).and_then(header_value);
                self.append(&entry, false, event.as_deref()).await && event.is_some()
            }
            step => {
                self.append(&entry, matches!(step, Step::Snapshot { .. }), None).await;
                false
            }
        }
    }

    /// Appends a marker and waits until it is stored.
    pub async fn mark(&self, record: Record) {
        self.append(&self.entry(record), false, None).await;
    }

    /// Waits until every entry published before is stored or given up on:
    /// the chain of entries appended behind (module docs) and the acks of
    /// the tool results; one without an ack is appended again (awaited).
    pub async fn settle(&self) {
        let mut unacked = self.unacked.lock().await;
        self.await_tail().await;
        await_acks(&mut unacked, self).await;
    }

    /// Appends `entry` after the entries before it and waits until it is
    /// stored ([`Self::store`]); whether it was.
    async fn append(&self, entry: &JournalEntry, snapshot: bool, event: Option<&str>) -> bool {
        let mut unacked = self.unacked.lock().await;
        self.await_tail().await;
        await_acks(&mut unacked, self).await;
        self.store(entry, snapshot, event, true).await
    }

    /// Hands `entry` to the next task of the chain (module docs), which
    /// appends it once the task before it has finished and the tool results
    /// published before are stored, waiting for its ack when `wait` (an
    /// entry something is appended behind); the loop goes on at once.
    async fn append_behind(self: &Arc<Self>, entry: JournalEntry, wait: bool) {
        let mut unacked = self.unacked.lock().await;
        let mut before = std::mem::take(&mut *unacked);
        let journal = self.clone();
        let mut tail = self.tail.lock().unwrap_or_else(|e| e.into_inner());
        let previous = tail.take();
        *tail = Some(tokio::spawn(async move {
            if let Some(previous) = previous {
                joined(previous).await;
            }
            await_acks(&mut before, &journal).await;
            journal.store(&entry, false, None, wait).await;
        }));
    }

    /// Waits for the chain of entries appended behind, if any; called with
    /// `unacked` held, so no entry overtakes them.
    async fn await_tail(&self) {
        let tail = self.tail.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(tail) = tail {
            joined(tail).await;
        }
    }

    fn entry(&self, record: Record) -> JournalEntry {
        JournalEntry { v: protocol::SCHEMA_VERSION, attempt: self.attempt, record }
    }

    /// Publishes a tool result's entry and keeps its ack for the next
    /// append (module docs); one that cannot be published is appended at
    /// once. While entries are appended behind (a turn of read-only calls
    /// before it) it joins their chain instead, so it is never stored
    /// before its turn.
    async fn append_result(self: &Arc<Self>, entry: JournalEntry) {
        if self.tail.lock().unwrap_or_else(|e| e.into_inner()).is_some() {
            return self.append_behind(entry, true).await;
        }
        let mut unacked = self.unacked.lock().await;
        match self.journal.append(&self.key, &entry, false, None).await {
            Ok(appended) => unacked.push((entry, appended)),
            Err(_) => {
                await_acks(&mut unacked, self).await;
                self.store(&entry, false, None, true).await;
            }
        }
    }

    /// Appends `entry` (with `event` in its header), retried within
    /// [`APPEND_BUDGET`], waiting for the ack when `wait`; whether it was
    /// published.
    async fn store(&self, entry: &JournalEntry, snapshot: bool, event: Option<&str>, wait: bool) -> bool {
        let stored = retry("journal append", APPEND_BUDGET, || async {
            let appended = self.journal.append(&self.key, entry, snapshot, event).await?;
            if wait { appended.stored().await.map(drop) } else { Ok(()) }
        })
        .await;
        if let Err(e) = &stored {
            tracing::warn!(error = %e, entry = entry.record.name(), "step not journaled; a later attempt would redo it");
        }
        stored.is_ok()
    }

    /// Folds the journal onto `base` (the task's first conversation) and
    /// writes the `resumed` marker; `None` when there is nothing to resume
    /// (no step recorded, or the journal cannot be read: logged, the attempt
    /// starts over).
    pub async fn resume(&self, base: Conversation) -> Option<Resume> {
        let read = match self.journal.read::<JournalEntry>(&self.key).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "step journal not readable; the task starts over");
                return None;
            }
        };
        let upto = read.entries.last().map(|e| e.seq).or(read.snapshot.as_ref().map(|s| s.seq)).unwrap_or(0);
        let mut resume = fold(base, read.snapshot, read.entries)?;
        resume.interrupted = resume.conversation.mark_interrupted();
        let from_step = resume.conversation.steps;
        let _ = self.resumed_from.set(from_step);
        self.mark(Record::Resumed { from_step, reason: resume.reason.clone(), upto }).await;
        Some(resume)
    }
}

/// Waits for a task of the chain of entries appended behind.
async fn joined(task: tokio::task::JoinHandle<()>) {
    if let Err(e) = task.await {
        tracing::warn!(error = %e, "a journal append behind the loop did not finish");
    }
}

/// Awaits the acks of `unacked` in order (held locked, so no entry
/// overtakes them); one without an ack is stored again, awaited.
async fn await_acks(unacked: &mut Vec<Unacked>, journal: &StepJournal) {
    for (entry, appended) in unacked.drain(..) {
        if appended.stored().await.is_err() {
            journal.store(&entry, false, None, true).await;
        }
    }
}

/// A progress event as the header of the entry that carries it: its
/// version 2 body, which is one line of JSON; `None` (the event is then
/// published on its own) for one that could not be a header value.
fn header_value(event: &ProgressEvent) -> Option<String> {
    String::from_utf8(event.encode()).ok().filter(|text| !text.contains(['\r', '\n']))
}

/// The conversation the journal describes: `snapshot` (else `base`) with the
/// entries after it, minus those an attempt wrote after a later attempt had
/// resumed past them. `None` when it holds no step.
pub fn fold(
    base: Conversation,
    snapshot: Option<Stored<JournalEntry>>,
    entries: Vec<Stored<JournalEntry>>,
) -> Option<Resume> {
    let fences: Vec<(u32, u64)> = entries
        .iter()
        .filter_map(|e| match e.entry.record {
            Record::Resumed { upto, .. } => Some((e.entry.attempt, upto)),
            _ => None,
        })
        .collect();
    let fenced =
        |e: &Stored<JournalEntry>| fences.iter().any(|(attempt, upto)| *attempt > e.entry.attempt && e.seq > *upto);
    let mut any = false;
    let mut conversation = base;
    if let Some(Stored { entry: JournalEntry { record: Record::Step { step }, .. }, .. }) = snapshot {
        conversation.apply(step);
        any = true;
    }
    let mut reason = "worker_lost".to_string();
    for e in entries.into_iter().filter(|e| !fenced(e)) {
        match e.entry.record {
            Record::Step { step } => {
                conversation.apply(step);
                any = true;
                reason = "worker_lost".into();
            }
            Record::HandedBack { reason: why } => reason = why,
            Record::Resumed { .. } => {}
        }
    }
    any.then_some(Resume { conversation, reason, interrupted: 0 })
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_agent::model::ToolCall;
    use flotilla_protocol::Usage;

    fn entry(seq: u64, attempt: u32, record: Record) -> Stored<JournalEntry> {
        let e = JournalEntry { v: 1, attempt, record };
        let text = serde_json::to_vec(&e).unwrap();
        Stored { seq, entry: protocol::decode(&text).unwrap() }
    }

    fn turn(id: &str) -> Record {
        let call = ToolCall { id: id.into(), name: "t".into(), arguments: serde_json::json!({}) };
        Record::Step {
            step: Step::Turn {
                message: ChatMessage::Assistant { content: None, tool_calls: vec![call] },
                usage: Usage::default(),
            },
        }
    }

    fn result(id: &str) -> Record {
        let message =
            ChatMessage::Tool { tool_call_id: id.into(), name: "t".into(), content: "1".into(), is_error: false };
        Record::Step { step: Step::ToolResult { message, ran: true } }
    }

    #[test]
    fn an_empty_journal_resumes_nothing() {
        assert!(fold(Conversation::new("s", "u"), None, vec![]).is_none());
    }

    #[test]
    fn a_hand_back_names_the_reason_and_later_steps_reset_it() {
        let r = fold(
            Conversation::new("s", "u"),
            None,
            vec![entry(1, 1, turn("a")), entry(2, 1, Record::HandedBack { reason: "drained".into() })],
        )
        .unwrap();
        assert_eq!((r.reason.as_str(), r.conversation.steps), ("drained", 1));
        let r = fold(
            Conversation::new("s", "u"),
            None,
            vec![
                entry(1, 1, turn("a")),
                entry(2, 1, Record::HandedBack { reason: "drained".into() }),
                entry(3, 2, result("a")),
            ],
        )
        .unwrap();
        assert_eq!(r.reason, "worker_lost");
    }

    #[test]
    fn steps_of_an_attempt_after_a_later_one_resumed_past_them_are_not_folded() {
        // Attempt 1 lost its task to ack_wait but kept running: its result
        // for `a` (seq 4) came after attempt 2 resumed from seq 1 and ran
        // `a` itself (seq 3).
        let entries = vec![
            entry(1, 1, turn("a")),
            entry(2, 2, Record::Resumed { from_step: 1, reason: "worker_lost".into(), upto: 1 }),
            entry(3, 2, result("a")),
            entry(4, 1, result("a")),
        ];
        let r = fold(Conversation::new("s", "u"), None, entries).unwrap();
        let results = r.conversation.messages.iter().filter(|m| matches!(m, ChatMessage::Tool { .. })).count();
        assert_eq!(results, 1, "{:?}", r.conversation.messages);
    }
}
