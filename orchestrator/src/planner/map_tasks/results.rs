//! The results of a map, one JSON line per item in item order (docs/TOOLS.md,
//! "map_tasks"): `{"index", "item", "task_id", "status", "summary" | "data" |
//! "error", "report"}` (`report` only when the full report is not at the usual
//! `/reports/<task id>.md`). Tasks end in any order; [`Ordered`] holds the lines that
//! arrive ahead of the first unfinished item and releases the contiguous
//! prefix, whose length is the map's done watermark.

use std::collections::BTreeMap;

use flotilla_protocol::ErrorInfo;
use flotilla_protocol::ids::TaskId;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How one item ended, as its results line says.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ResultLine {
    /// The item's index in the items file.
    pub index: usize,
    /// The item itself.
    pub item: Value,
    /// The item's task (none when it could not be dispatched).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<TaskId>,
    /// `completed`, or how the task did not complete (`failed`, `cancelled`, ...).
    pub status: String,
    /// The task's (capped) report summary, when it completed with text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// The task's answer, when it completed with a structured answer
    /// (a JSON object or array: [`crate::reports::structured_answer`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
    /// Why it did not complete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorInfo>,
    /// The full report in the job files, when it is not at the usual
    /// `/reports/<task id>.md`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<String>,
}

impl ResultLine {
    /// Whether the item's task completed.
    pub fn completed(&self) -> bool {
        self.status == "completed"
    }
}

/// Reorders finished items into item order.
#[derive(Debug)]
pub struct Ordered {
    /// The first index not yet released: every item before it is in `out`
    /// or was released earlier.
    next: usize,
    /// Lines that finished ahead of `next`, by index.
    ahead: BTreeMap<usize, ResultLine>,
    /// Released lines not yet taken, JSONL.
    out: String,
    /// How many lines `out` holds.
    out_lines: usize,
    completed: usize,
    failed: usize,
}

impl Ordered {
    /// A buffer whose first index to release is `done`, with the counts of
    /// the items before it.
    pub fn new(done: usize, completed: usize, failed: usize) -> Self {
        Self { next: done, ahead: BTreeMap::new(), out: String::new(), out_lines: 0, completed, failed }
    }

    /// Adds a finished item and releases what became contiguous.
    pub fn push(&mut self, line: ResultLine) {
        if line.index < self.next {
            return; // already released (a duplicate outcome)
        }
        self.ahead.insert(line.index, line);
        while let Some(line) = self.ahead.remove(&self.next) {
            if line.completed() {
                self.completed += 1;
            } else {
                self.failed += 1;
            }
            // A line of plain serde values cannot fail to serialize.
            self.out.push_str(&serde_json::to_string(&line).unwrap_or_default());
            self.out.push('\n');
            self.out_lines += 1;
            self.next += 1;
        }
    }

    /// The done watermark: how many leading items have been released.
    pub fn done(&self) -> usize {
        self.next
    }

    /// Completed and failed items among the released ones.
    pub fn counts(&self) -> (usize, usize) {
        (self.completed, self.failed)
    }

    /// Released lines not yet taken, and their size in bytes.
    pub fn buffered(&self) -> (usize, usize) {
        (self.out_lines, self.out.len())
    }

    /// Takes the released lines (JSONL) out of the buffer.
    pub fn take(&mut self) -> String {
        self.out_lines = 0;
        std::mem::take(&mut self.out)
    }
}

#[cfg(test)]
mod tests {
    use flotilla_protocol::ErrorKind;
    use serde_json::json;

    use super::*;

    fn line(index: usize, status: &str) -> ResultLine {
        let failed = status != "completed";
        ResultLine {
            index,
            item: json!({"n": index}),
            task_id: Some(TaskId::new()),
            status: status.into(),
            summary: (!failed).then(|| format!("ok {index}")),
            data: None,
            error: failed.then(|| ErrorInfo::new(ErrorKind::Business, "no")),
            report: None,
        }
    }

    fn indexes(jsonl: &str) -> Vec<usize> {
        jsonl.lines().map(|l| serde_json::from_str::<ResultLine>(l).unwrap().index).collect()
    }

    #[test]
    fn lines_are_released_in_item_order_whatever_order_items_end_in() {
        let mut o = Ordered::new(0, 0, 0);
        o.push(line(2, "completed"));
        o.push(line(1, "failed"));
        assert_eq!((o.done(), o.buffered().0), (0, 0), "item 0 holds the rest back");
        o.push(line(0, "completed"));
        assert_eq!(o.done(), 3);
        o.push(line(4, "completed"));
        assert_eq!(indexes(&o.take()), [0, 1, 2]);
        assert_eq!(o.buffered(), (0, 0));
        o.push(line(3, "cancelled"));
        assert_eq!(indexes(&o.take()), [3, 4]);
        assert_eq!((o.done(), o.counts()), (5, (3, 2)));
    }

    #[test]
    fn a_resumed_buffer_starts_at_the_watermark_and_ignores_earlier_items() {
        let mut o = Ordered::new(10, 7, 3);
        o.push(line(9, "completed"));
        o.push(line(10, "completed"));
        assert_eq!(indexes(&o.take()), [10]);
        assert_eq!(o.counts(), (8, 3));
    }

    #[test]
    fn a_line_carries_the_item_the_task_and_the_summary_or_the_error() {
        let ok: Value = serde_json::from_str(&serde_json::to_string(&line(0, "completed")).unwrap()).unwrap();
        assert_eq!((ok["item"].clone(), ok["summary"].clone()), (json!({"n": 0}), json!("ok 0")));
        assert!(ok.get("error").is_none() && ok["task_id"].is_string());
        let failed: Value = serde_json::from_str(&serde_json::to_string(&line(1, "failed")).unwrap()).unwrap();
        assert_eq!((failed["status"].clone(), failed["error"]["message"].clone()), (json!("failed"), json!("no")));
        assert!(failed.get("summary").is_none());
    }
}
