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

fn round_trip_progress(ev: &ProgressEvent) {
    let back = ProgressEvent::decode(&ev.encode(), ev.job_id, ev.task_id).unwrap();
    assert_eq!(&back, ev);
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
        summary_file: Some(super::FileRef::describe("/reports/t.md", "big\nanswer", "ab".repeat(32))),
        error: Some(ErrorInfo::new(ErrorKind::Transient, "model returned 503")),
        usage: Usage { input_tokens: 10, output_tokens: 5, model_calls: 1, tool_calls: 2, ..Usage::default() },
        worker_id: "w1".into(),
        attempt: 2,
        resumed_from_step: Some(3),
        started_at: now(),
        finished_at: now(),
        duration_ms: 12,
    };
    let back = TaskReport::decode(&report.encode(), report.job_id, &report.subagent_type, report.task_id).unwrap();
    assert_eq!(back, TaskReport { v: REPORT_VERSION, ..report.clone() });
    round_trip_progress(&ProgressEvent {
        v: PROGRESS_VERSION,
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
    let mut entry = TaskEntry::dispatched(t.task_id, t.subagent_type.clone(), "d".into(), "call_1_0".into());
    entry.published = true;
    rec.tasks.push(entry);
    round_trip(&rec);
    round_trip(&SubmitRequest { v: 1, input: "x".into(), files: vec![], subagent_type: None });
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
    assert!(err(b"[1]").contains("expected a JSON object"), "a struct as an array is refused");
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

mod fuzz {
    //! Property tests of decoding: no input makes it panic, and what it
    //! accepts re-encodes to an equivalent message.
    use proptest::prelude::*;

    use super::super::*;

    fn json_value() -> impl Strategy<Value = serde_json::Value> {
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::from),
            any::<i64>().prop_map(serde_json::Value::from),
            any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(serde_json::Value::from),
            "[a-z0-9_.:-]{0,40}".prop_map(serde_json::Value::from),
        ];
        leaf.prop_recursive(4, 64, 8, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::Array),
                prop::collection::btree_map(
                    prop_oneof![
                        Just("v".to_string()),
                        Just("job_id".to_string()),
                        Just("task_id".to_string()),
                        Just("subagent_type".to_string()),
                        Just("description".to_string()),
                        Just("created_at".to_string()),
                        "[a-z_]{1,12}",
                    ],
                    inner,
                    0..8
                )
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
            let _ = decode::<TaskMessage>(&bytes);
            let _ = TaskReport::decode(&bytes, crate::ids::JobId::new(), &crate::ids::SubagentType::new("finance").unwrap(), crate::ids::TaskId::new());
            let _ = decode::<SubmitRequest>(&bytes);
            let _ = decode::<JobEvent>(&bytes);
        }

        #[test]
        fn arbitrary_json_is_accepted_only_when_well_formed(mut v in json_value(), version in 0u32..3) {
            if let serde_json::Value::Object(m) = &mut v {
                m.insert("v".into(), version.into());
            }
            let bytes = serde_json::to_vec(&v).unwrap();
            match decode::<TaskMessage>(&bytes) {
                Ok(t) => {
                    prop_assert_eq!(version, SCHEMA_VERSION);
                    let again: TaskMessage = decode(&encode(&t)).unwrap();
                    prop_assert_eq!(again, t);
                }
                Err(e) => prop_assert!(!e.to_string().is_empty()),
            }
        }

        #[test]
        fn valid_tasks_with_any_text_round_trip(description in any::<String>(), attempt in 1u32..100) {
            let mut t = super::task();
            t.description = description;
            t.attempt = attempt;
            let back: TaskMessage = decode(&encode(&t)).unwrap();
            prop_assert_eq!(back, t);
        }
    }
}

/// A peer one release newer (minor version 1.1, a field this build does not
/// know) is still heard; another major is refused by name.
#[test]
fn newer_minor_versions_and_unknown_report_fields_are_accepted() {
    let report = TaskReport {
        v: REPORT_VERSION,
        job_id: JobId::new(),
        task_id: TaskId::new(),
        subagent_type: SubagentType::new("finance").unwrap(),
        status: TaskStatus::Completed,
        summary: "0.375".into(),
        summary_file: None,
        error: None,
        usage: Usage { input_tokens: 3, ..Usage::default() },
        worker_id: "w1".into(),
        attempt: 1,
        resumed_from_step: None,
        started_at: crate::now(),
        finished_at: crate::now(),
        duration_ms: 5,
    };
    let read = |v: &serde_json::Value| {
        TaskReport::decode(&serde_json::to_vec(v).unwrap(), report.job_id, &report.subagent_type, report.task_id)
    };
    let mut v: serde_json::Value = serde_json::from_slice(&report.encode()).unwrap();
    v["v"] = serde_json::json!(2.1);
    v["confidence"] = 0.9.into();
    v["usage"]["cache_read_tokens"] = 7.into();
    assert_eq!(read(&v).expect("a newer minor version is read"), report, "known fields read as written");
    // A version 1 body (an older worker's) carries the ids, and is read.
    let mut old = serde_json::to_value(&report).unwrap();
    old["v"] = serde_json::json!(1.1);
    assert_eq!(read(&old).expect("version 1 is read"), report);
    v["v"] = serde_json::json!(3.0);
    let e = read(&v).unwrap_err().to_string();
    assert!(e.contains("unsupported schema version 3.0"), "{e}");
    // A command stays strict at any minor version: a task cannot carry unknown fields.
    let mut t = serde_json::to_value(task()).unwrap();
    t["v"] = serde_json::json!(1.2);
    decode::<TaskMessage>(&serde_json::to_vec(&t).unwrap()).expect("minor version of a command");
    t["tools"] = serde_json::json!(["execute"]);
    let e = decode::<TaskMessage>(&serde_json::to_vec(&t).unwrap()).unwrap_err().to_string();
    assert!(e.contains("unknown field `tools`"), "{e}");
}

#[test]
fn cache_token_counts_round_trip_add_up_and_are_optional_on_the_wire() {
    let old: Usage = serde_json::from_str(r#"{"input_tokens": 7, "output_tokens": 2, "model_calls": 1}"#).unwrap();
    assert_eq!((old.cache_creation_input_tokens, old.cache_read_input_tokens), (0, 0), "old messages decode");
    let plain = serde_json::to_string(&old).unwrap();
    assert!(!plain.contains("cache_"), "no cache fields without cache tokens: {plain}");
    let mut sum =
        Usage { input_tokens: 100, cache_creation_input_tokens: 60, cache_read_input_tokens: 30, ..Usage::default() };
    sum += sum;
    assert_eq!((sum.input_tokens, sum.cache_creation_input_tokens, sum.cache_read_input_tokens), (200, 120, 60));
    let back: Usage = serde_json::from_str(&serde_json::to_string(&sum).unwrap()).unwrap();
    assert_eq!(back, sum);
}

#[test]
fn a_model_delta_event_is_tagged_and_omits_a_zero_skip() {
    let t = task();
    let ev = ProgressEvent {
        v: PROGRESS_VERSION,
        job_id: t.job_id,
        task_id: t.task_id,
        subagent_type: t.subagent_type.clone(),
        worker_id: "w1".into(),
        attempt: 1,
        at: now(),
        kind: ProgressKind::ModelDelta { step: 2, text: "The margin is".into(), skipped_chars: 0 },
    };
    round_trip_progress(&ev);
    let json: serde_json::Value = serde_json::from_slice(&ev.encode()).unwrap();
    assert_eq!(json["event"], "model_delta");
    assert_eq!(json["text"], "The margin is");
    assert!(json.get("skipped_chars").is_none(), "{json}");
}

#[test]
fn a_failed_model_call_is_tagged_and_omits_a_zero_usage() {
    let t = task();
    let mut ev = ProgressEvent {
        v: PROGRESS_VERSION,
        job_id: t.job_id,
        task_id: t.task_id,
        subagent_type: t.subagent_type.clone(),
        worker_id: "w1".into(),
        attempt: 1,
        at: now(),
        kind: ProgressKind::ModelFailed {
            step: 3,
            error_kind: ErrorKind::Transient,
            latency_ms: 1203,
            usage: Usage::default(),
        },
    };
    round_trip_progress(&ev);
    let json: serde_json::Value = serde_json::from_slice(&ev.encode()).unwrap();
    assert_eq!(json["event"], "model_failed");
    assert_eq!(
        (json["step"].as_u64(), json["error_kind"].as_str(), json["latency_ms"].as_u64()),
        (Some(3), Some("transient"), Some(1203))
    );
    assert!(json.get("usage").is_none(), "{json}");
    let usage = Usage { input_tokens: 40, ..Usage::default() };
    ev.kind = ProgressKind::ModelFailed { step: 3, error_kind: ErrorKind::Validation, latency_ms: 9, usage };
    round_trip_progress(&ev);
    let json: serde_json::Value = serde_json::from_slice(&ev.encode()).unwrap();
    assert_eq!(json["usage"]["input_tokens"], 40);
    let planner = JobEvent {
        v: SCHEMA_VERSION,
        job_id: t.job_id,
        at: now(),
        kind: JobEventKind::PlannerStepFailed {
            step: 1,
            error_kind: ErrorKind::Timeout,
            latency_ms: 30_000,
            usage: Usage::default(),
        },
    };
    round_trip(&planner);
    let json: serde_json::Value = serde_json::from_slice(&encode(&planner)).unwrap();
    assert_eq!(json["event"], "planner_step_failed");
    assert_eq!(json["error_kind"], "timeout");
}

#[test]
fn a_progress_body_takes_its_ids_from_the_subject_and_reads_version_one() {
    let t = task();
    let ev = ProgressEvent {
        v: PROGRESS_VERSION,
        job_id: t.job_id,
        task_id: t.task_id,
        subagent_type: t.subagent_type.clone(),
        worker_id: "w1".into(),
        attempt: 2,
        at: now(),
        kind: ProgressKind::Started,
    };
    let body: serde_json::Value = serde_json::from_slice(&ev.encode()).unwrap();
    assert_eq!(body["v"], 2);
    assert!(body.get("job_id").is_none() && body.get("task_id").is_none(), "the subject carries them: {body}");
    assert_eq!((body["event"].as_str(), body["attempt"].as_u64()), (Some("started"), Some(2)));
    let first = ProgressEvent { attempt: 1, ..ev.clone() };
    let body: serde_json::Value = serde_json::from_slice(&first.encode()).unwrap();
    assert!(body.get("attempt").is_none(), "a first attempt is the default: {body}");
    assert_eq!(ProgressEvent::decode(&first.encode(), t.job_id, t.task_id).unwrap(), first);
    let other = TaskId::new();
    assert_eq!(ProgressEvent::decode(&ev.encode(), t.job_id, other).unwrap().task_id, other, "the subject's ids");

    // A version 1 body (an older worker's) is read when its ids are its subject's.
    let mut v1 = serde_json::to_value(&ev).unwrap();
    v1["v"] = 1.into();
    let v1 = serde_json::to_vec(&v1).unwrap();
    assert_eq!(ProgressEvent::decode(&v1, t.job_id, t.task_id).unwrap(), ev);
    let e = ProgressEvent::decode(&v1, t.job_id, other).unwrap_err().to_string();
    assert!(e.contains("names another task than its subject's"), "{e}");
    let e = ProgressEvent::decode(br#"{"v":3,"event":"started"}"#, t.job_id, t.task_id).unwrap_err().to_string();
    assert!(e.contains("unsupported schema version 3 (this build speaks version 1 or 2"), "{e}");
    let e = decode::<TaskMessage>(br#"{"v":2}"#).unwrap_err().to_string();
    assert!(e.contains("speaks version 1 of this message"), "{e}");
}

#[test]
fn a_report_body_takes_its_ids_from_the_subject_and_keeps_those_of_version_one() {
    let t = task();
    let report = TaskReport {
        v: REPORT_VERSION,
        job_id: t.job_id,
        task_id: t.task_id,
        subagent_type: t.subagent_type.clone(),
        status: TaskStatus::Completed,
        summary: "0.375".into(),
        summary_file: None,
        error: None,
        usage: Usage::default(),
        worker_id: "w1".into(),
        attempt: 1,
        resumed_from_step: None,
        started_at: now(),
        finished_at: now(),
        duration_ms: 5,
    };
    let body: serde_json::Value = serde_json::from_slice(&report.encode()).unwrap();
    assert_eq!(body["v"], 2);
    for field in ["job_id", "task_id", "subagent_type", "attempt"] {
        assert!(body.get(field).is_none(), "{field} is the subject's (or the default): {body}");
    }
    let research = SubagentType::new("research").unwrap();
    let other = TaskId::new();
    let read = TaskReport::decode(&report.encode(), t.job_id, &research, other).unwrap();
    assert_eq!((read.subagent_type, read.task_id, read.attempt), (research.clone(), other, 1), "the subject's");
    // A version 1 body keeps the ids it claims, for the reader to compare.
    let mut v1 = serde_json::to_value(&report).unwrap();
    v1["v"] = 1.into();
    let read = TaskReport::decode(&serde_json::to_vec(&v1).unwrap(), t.job_id, &research, other).unwrap();
    assert_eq!((read.subagent_type, read.task_id), (t.subagent_type, t.task_id));
}
