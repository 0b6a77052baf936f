//! Limits a tenant (or the model working for it) could once pass with real
//! processes, replayed against them:
//!
//! - a `map_tasks` description template that allocates or loops without end
//!   (`"x" * 100000000` four times; a 5000 x 5000 loop) is a validation error
//!   naming the construct or the fuel budget, no task is dispatched, and the
//!   job API keeps answering another tenant meanwhile (docs/TOOLS.md,
//!   "map_tasks");
//! - upload staging (`files_put`) is bounded per tenant by
//!   `[files.staging] max_tenant_bytes`: the tenant over it gets a `limit`
//!   error naming the key, another tenant still uploads and submits;
//! - a part index of `u32::MAX` gets a reply (a limit error), not a panic.

use std::time::Duration;

use flotilla_protocol::files_api::{
    FILE_PART_BYTES, FilesLsReply, FilesLsRequest, FilesPutReply, FilesPutRequest, StagedFile, UploadId,
};
use flotilla_protocol::ids::Tenant;
use flotilla_protocol::{
    ApiReply, ErrorInfo, ErrorKind, ListReply, ListRequest, SCHEMA_VERSION, SubmitReply, SubmitRequest,
};
use flotilla_testkit::proc::run_cli;
use flotilla_testkit::{EventLog, TestConfig, eventually};
use serde_json::Value;

use flotilla_testkit::{Deployment, TIMEOUT};

/// Two `map_tasks` calls in one turn, each with a hostile template (in
/// `{% raw %}` so the script does not render it itself); the answer holds
/// both errors.
const HOSTILE_PLANNER: &str = r#"
[[turns]]
[[turns.calls]]
tool = "map_tasks"
args = '''{"subagent_type": "finance", "items": "/inputs/regions.jsonl", "description": "{% raw %}{% for i in range(4) %}{{ \"x\" * 100000000 }}{% endfor %}{% endraw %}"}'''
[[turns.calls]]
tool = "map_tasks"
args = '''{"subagent_type": "finance", "items": "/inputs/regions.jsonl", "description": "{% raw %}{% for i in range(5000) %}{% for j in range(5000) %}{% endfor %}{% endfor %}margin of {{ item.region }}{% endraw %}"}'''
[[turns]]
content = "{{ last[0].error.kind }}: {{ last[0].error.message }} || {{ last[1].error.kind }}: {{ last[1].error.message }}"
"#;

const FINANCE: &str = r#"
[[turns]]
content = "done"
"#;

fn map_config(url: &str) -> TestConfig {
    let mut c = TestConfig::new(url);
    c.scripted_model("planner", HOSTILE_PLANNER);
    c.scripted_model("finance", FINANCE);
    c.section("[planner]\nmodel = \"planner\"\ntask_timeout = 60\n");
    c.section("[subagents.finance]\ndescription = \"Computes gross margins.\"\nmodel = \"finance\"\n");
    c
}

/// Another tenant's job listing: answered, and well formed.
async fn list_as(d: &Deployment, tenant: &Tenant) -> ListReply {
    let req = ListRequest { v: SCHEMA_VERSION, status: None, limit: Some(10), after: None, since: None };
    let reply: ApiReply<ListReply> =
        d.bus.request(tenant, "list", &req, Duration::from_secs(30)).await.expect("the job API answers");
    reply.into_result().expect("list refused")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_map_template_past_its_fuel_is_refused_and_other_tenants_are_served() {
    let d = Deployment::start(1, map_config).await;
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let local = d.config.dir().join("regions.jsonl");
    std::fs::write(&local, "{\"region\": \"north\"}\n{\"region\": \"south\"}\n{\"region\": \"east\"}\n").unwrap();
    let file = format!("{}:/inputs/regions.jsonl", local.display());
    let config = d.config_arg();
    let args = ["--config", config.as_str(), "submit", "margins", "--file", file.as_str(), "--json"];
    let out = eventually(TIMEOUT, "the orchestrator to accept the job", || async {
        let (code, out, err) = run_cli(&args, &[]);
        assert!(code == 0 || out.contains("no orchestrator is listening"), "submit failed: {out}{err}");
        (code == 0).then_some(out)
    })
    .await;
    let reply: Value = serde_json::from_str(&out).expect("submit --json");
    let job = reply["job_id"].as_str().unwrap().parse().unwrap();

    // While the map is checked, another tenant's calls are answered.
    let globex = Tenant::new("globex").unwrap();
    let served = async {
        let mut answered = 0;
        while d.status_opt(job).await.is_none_or(|r| !r.status.is_terminal()) {
            assert!(list_as(&d, &globex).await.jobs.is_empty(), "globex sees none of acme's jobs");
            answered += 1;
        }
        answered
    };
    let (end, answered) = tokio::join!(log.job_end(Duration::from_secs(120)), served);

    assert_eq!(end["event"], "completed", "{end}");
    let answer = d.status(job).await.answer.unwrap();
    let errors: Vec<&str> = answer.split(" || ").collect();
    assert_eq!(errors.len(), 2, "{answer}");
    assert!(errors.iter().all(|e| e.starts_with("validation: ")), "{answer}");
    // Repetition is refused before anything runs; the loop runs out of fuel.
    assert!(errors[0].contains("uses `*`"), "{}", errors[0]);
    assert!(
        errors[1].contains("budget of 100000 fuel") && errors[1].contains("nothing was dispatched"),
        "{}",
        errors[1]
    );
    log.drain();
    assert!(log.events("task_dispatched").is_empty(), "no task for a refused map");
    list_as(&d, &globex).await;
    eprintln!(
        "figures: both hostile templates refused (shape, fuel); globex's listing answered {answered} times meanwhile"
    );
}

/// Stages `bytes` as part `index` of `upload` for `tenant`.
async fn put(d: &Deployment, tenant: &Tenant, upload: UploadId, index: u32, bytes: &[u8]) -> Result<(), ErrorInfo> {
    let req = FilesPutRequest { v: SCHEMA_VERSION, upload, index, data: crate::http_api::base64(bytes) };
    let reply: ApiReply<FilesPutReply> =
        d.bus.request(tenant, "files_put", &req, Duration::from_secs(30)).await.expect("files_put answered");
    reply.into_result().map(|_| ())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_tenant_over_its_staging_quota_is_refused_and_another_still_submits() {
    let d = Deployment::start(0, |url| {
        let mut c = TestConfig::new(url);
        c.scripted_model("planner", "[[turns]]\ncontent = \"done\"\n");
        c.section("[planner]\nmodel = \"planner\"\n");
        // One upload of up to 1 MiB; two uploads' worth staged per tenant.
        c.section("[files]\nmax_upload_bytes = 1048576\n[files.staging]\nmax_tenant_bytes = 2097152\n");
        c
    })
    .await;
    d.orchestrator_ready().await;
    let (acme, globex) = (Tenant::new("acme").unwrap(), Tenant::new("globex").unwrap());
    let part = vec![b'a'; FILE_PART_BYTES];

    // acme stages full parts under fresh upload ids (each within max_upload_bytes) until refused.
    let mut staged = 0;
    let refusal = loop {
        match put(&d, &acme, UploadId::new_v4(), 0, &part).await {
            Ok(()) => staged += 1,
            Err(e) => break e,
        }
        assert!(staged <= 4, "acme staged {staged} parts of {FILE_PART_BYTES} bytes past a 2 MiB quota");
    };
    assert_eq!(staged, 4, "2 MiB of parts fit the quota");
    assert_eq!(refusal.kind, ErrorKind::Limit, "{refusal}");
    assert!(!refusal.retryable);
    assert!(refusal.message.contains("[files.staging] max_tenant_bytes (2097152 bytes)"), "{}", refusal.message);

    // A part index at u32::MAX is answered with a limit error (it once overflowed).
    let e = put(&d, &acme, UploadId::new_v4(), u32::MAX, b"x").await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Limit, "{e}");
    assert!(e.message.contains("max_upload_bytes"), "{e}");

    // globex uploads a whole file and submits a job with it.
    let upload = UploadId::new_v4();
    let tail = b"the rest of globex's file";
    put(&d, &globex, upload, 0, &part).await.expect("globex's first part");
    put(&d, &globex, upload, 1, tail).await.expect("globex's second part");
    let all = [part.as_slice(), tail].concat();
    let file = StagedFile {
        upload,
        parts: 2,
        path: "/inputs/data.txt".into(),
        size: all.len() as u64,
        sha256: flotilla_protocol::digest::sha256_hex(&all),
    };
    let req = SubmitRequest { v: SCHEMA_VERSION, input: "use the data".into(), files: vec![file], subagent_type: None };
    let reply: ApiReply<SubmitReply> =
        d.bus.request(&globex, "submit", &req, Duration::from_secs(30)).await.expect("submit answered");
    let job = reply.into_result().expect("globex's submit").job_id;
    let ls = FilesLsRequest { v: SCHEMA_VERSION, job_id: job, prefix: None, after: None, limit: None };
    let reply: ApiReply<FilesLsReply> =
        d.bus.request(&globex, "files_ls", &ls, Duration::from_secs(30)).await.expect("files_ls answered");
    let files = reply.into_result().expect("files_ls").files;
    assert!(files.iter().any(|f| f.path == "/inputs/data.txt" && f.size == all.len() as u64), "{files:?}");
}
