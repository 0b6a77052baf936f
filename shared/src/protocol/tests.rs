use super::*;
use crate::ids::{JobId, SubagentType, TaskId, Tenant};

fn task() -> TaskMessage {
    TaskMessage {
        v: SCHEMA_VERSION,
        job_id: JobId::new(),
        task_id: TaskId::new(),
        subagent_type: SubagentType::new("finance").unwrap(),
        description: "margin for north: revenue 120, cost 75".into(),
        tenant: Tenant::default(),
        attempt: 1,
        deadline: Some(now()),
        traceparent: Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into()),
        created_at: now(),
    }
}

fn round_trip<T: Message + PartialEq + std::fmt::Debug>(msg: &T) {
    let bytes = encode(msg);
    let back: T = decode(&bytes).unwrap();
    assert_eq!(&back, msg);
}

#[test]
fn every_message_round_trips() {
    let t = task();
    round_trip(&t);
    let report = TaskReport {
        v: SCHEMA_VERSION,
        job_id: t.job_id,
        task_id: t.task_id,
        subagent_type: t.subagent_type.clone(),
        status: TaskStatus::Failed,
        summary: String::new(),
        error: Some(ErrorInfo::new(ErrorKind::Transient, "model returned 503")),
        usage: Usage { input_tokens: 10, output_tokens: 5, model_calls: 1, tool_calls: 2 },
        worker_id: "w1".into(),
        attempt: 2,
        started_at: now(),
        finished_at: now(),
        duration_ms: 12,
    };
    round_trip(&report);
    round_trip(&ProgressEvent {
        v: SCHEMA_VERSION,
        job_id: t.job_id,
        task_id: t.task_id,
        subagent_type: t.subagent_type.clone(),
        worker_id: "w1".into(),
        attempt: 1,
        at: now(),
        kind: ProgressKind::ToolResult {
            call_id: "c1".into(),
            tool: "calculate_margin".into(),
            error_kind: Some(ErrorKind::Business),
            size: 40,
            duration_ms: 1,
        },
    });
    round_trip(&JobEvent {
        v: SCHEMA_VERSION,
        job_id: t.job_id,
        at: now(),
        kind: JobEventKind::TodosChanged { todos: vec![Todo { content: "a".into(), status: TodoStatus::InProgress }] },
    });
    let mut rec = JobRecord::new(t.job_id, Tenant::default(), "job".into());
    rec.tasks.push(TaskEntry {
        task_id: t.task_id,
        subagent_type: t.subagent_type.clone(),
        description: "d".into(),
        status: None,
        summary: String::new(),
        error: None,
        usage: Usage::default(),
        worker_id: None,
        attempt: 0,
        duration_ms: 0,
    });
    round_trip(&rec);
    round_trip(&SubmitRequest { v: 1, input: "x".into() });
    round_trip(&ApiReply::ok(SubmitReply { job_id: t.job_id }));
    round_trip(&ApiReply::<SubmitReply>::error(ErrorKind::NotFound, "no job"));
}

#[test]
fn wire_shapes_are_stable() {
    let reply = ApiReply::<SubmitReply>::error(ErrorKind::NotFound, "no job x");
    let json: serde_json::Value = serde_json::from_slice(&encode(&reply)).unwrap();
    assert_eq!(
        json,
        serde_json::json!({"v": 1, "error": {"kind": "not_found", "message": "no job x", "retryable": false}})
    );
    let ev = JobEvent { v: 1, job_id: JobId::new(), at: now(), kind: JobEventKind::Running };
    let json: serde_json::Value = serde_json::from_slice(&encode(&ev)).unwrap();
    assert_eq!(json["event"], "running");
}

#[test]
fn decode_explains_what_is_wrong() {
    let err = |b: &[u8]| decode::<TaskMessage>(b).unwrap_err().to_string();
    assert!(err(b"not json").contains("malformed message"));
    assert!(err(b"[1,2]").contains("malformed message"));
    assert!(err(b"{}").contains("missing schema version"));
    assert!(err(br#"{"v":2}"#).contains("unsupported schema version 2"));
    assert!(err(br#"{"v":1}"#).contains("invalid task message: missing field"));
    let mut v = serde_json::to_value(task()).unwrap();
    v["extra"] = 1.into();
    assert!(err(&serde_json::to_vec(&v).unwrap()).contains("unknown field `extra`"));
    v = serde_json::to_value(task()).unwrap();
    v["subagent_type"] = "a.b".into();
    assert!(err(&serde_json::to_vec(&v).unwrap()).contains("invalid subagent type"));
    let big = vec![b' '; MAX_MESSAGE_BYTES + 1];
    assert!(err(&big).contains("exceeds"));
}
