//! Job history at fleet scale, against a real nats-server and a
//! real orchestrator with its dashboard.
//!
//! History is made fast: each finished job is written as the orchestrator's
//! job store would leave it (a `completed` header in the jobs bucket and its
//! entry in the job index, shared/bus/src/job_index.rs) straight through the
//! bus, 64 at a time, instead of running thousands of jobs.
//!
//! - A listing whose filter matches nothing (`status = failed`) makes the
//!   orchestrator read at most 3 messages a listing (counted by nats-server's
//!   `/connz`) with 1 000 and with 5 000 finished jobs: it asks the server
//!   whether any index key matches, it does not read the history.
//! - One `list` request asking for 100 000 gets one page (at most
//!   `MAX_LIST_PAGE`) and a cursor; `flotilla jobs --limit 100000 --json`
//!   follows the pages and returns all 5 000, newest first, each once.
//! - The dashboard's `/api/jobs` pages the same way.
//! - A job past `[jobs] retention_days` (set to 4.3 s) is gone from the
//!   listing, `status` (`not_found`) and `files`; its keys and files are deleted.
//! - `jobs prune --before` deletes the tenant's finished jobs, not a running one.
//! - 1 000 demo jobs after 100 warm-up ones leave no job record in the
//!   orchestrator's memory (`flotilla_jobs_in_memory`), its RSS within 10 %,
//!   and each job completed exactly once (a finished job is never planned
//!   again).
//! - A job page's task view (orchestrator/src/jobs/task_views.rs) reads
//!   the jobs bucket's changes after a revision: exactly the writes since,
//!   in order, purges as deletions.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use flotilla_bus::{JobIndex, JobRecords};
use flotilla_config::FilesConfig;
use flotilla_protocol::ids::{JobId, Tenant};
use flotilla_protocol::{
    ApiReply, ErrorKind, JobRecord, JobStatus, ListReply, ListRequest, MAX_LIST_PAGE, SCHEMA_VERSION, StatusRequest,
};
use flotilla_testkit::proc::run_cli;
use flotilla_testkit::{TempDir, TestConfig, eventually, free_port};
use futures::StreamExt;

use flotilla_testkit::{Deployment, TIMEOUT};

/// Writes `n` completed jobs of the default tenant as the job store would.
async fn write_finished(records: &JobRecords, index: &JobIndex, n: usize) -> Vec<JobId> {
    flotilla_bus::seed_finished_jobs(records, index, &Tenant::default(), n).await.expect("history written")
}

async fn list(d: &Deployment, req: &ListRequest) -> ListReply {
    let r: ApiReply<ListReply> =
        d.bus.request(&Tenant::default(), "list", req, Duration::from_secs(10)).await.expect("list answered");
    r.into_result().expect("list refused")
}

/// Messages the orchestrator received from the server (counted by the
/// server) while it answered 15 listings of `status = failed`, which matches
/// no job, and the fastest of those listings (a figure, not asserted: times
/// on a shared 2-core machine are noise; the message count is the cost).
async fn empty_listing_cost(d: &Deployment) -> (u64, Duration) {
    let req = ListRequest { v: SCHEMA_VERSION, status: Some(JobStatus::Failed), limit: Some(20), ..Default::default() };
    assert!(list(d, &req).await.jobs.is_empty(), "no job failed"); // warm-up
    let before = d.nats.messages_sent_to(ORCHESTRATOR).await;
    let mut fastest = Duration::MAX;
    for _ in 0..15 {
        let started = Instant::now();
        assert!(list(d, &req).await.jobs.is_empty(), "no job failed");
        fastest = fastest.min(started.elapsed());
    }
    (d.nats.messages_sent_to(ORCHESTRATOR).await - before, fastest)
}

/// The orchestrator's NATS connection name (orchestrator/src/service.rs).
const ORCHESTRATOR: &str = "flotilla-orchestrator";

fn config(url: &str, port: u16) -> TestConfig {
    let mut c = TestConfig::demo(url, 1, 0);
    c.section(&format!("[dashboard]\nlisten = \"127.0.0.1:{port}\"\n"));
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_cost_follows_what_it_returns_and_every_page_is_reachable() {
    let port = free_port();
    let d = Deployment::start(0, |url| config(url, port)).await;
    d.orchestrator_ready().await;
    let (records, index) = (d.bus.job_records().await.unwrap(), d.bus.job_index().await.unwrap());

    let started = Instant::now();
    let mut ids = write_finished(&records, &index, 1_000).await;
    let (msgs_1000, time_1000) = empty_listing_cost(&d).await;
    ids.extend(write_finished(&records, &index, 4_000).await);
    let written = started.elapsed();
    let (msgs_5000, time_5000) = empty_listing_cost(&d).await;
    eprintln!(
        "figures: history of 5000 finished jobs written in {written:?}; 15 `status=failed` listings (match none): \
         {msgs_1000} messages to the orchestrator at 1000 jobs, {msgs_5000} at 5000; fastest {time_1000:?} and {time_5000:?}"
    );
    // A listing is its request plus one answer from the server (is there any
    // matching key?), with a margin for what the idle orchestrator receives
    // meanwhile; reading index tails or keys would be several more a listing.
    for (jobs, msgs) in [(1_000, msgs_1000), (5_000, msgs_5000)] {
        assert!(msgs <= 15 * 3, "15 empty listings over {jobs} jobs made the orchestrator read {msgs} messages");
    }

    // One request for everything gets one page and a cursor.
    let all = ListRequest { v: SCHEMA_VERSION, limit: Some(100_000), ..Default::default() };
    let page = list(&d, &all).await;
    assert_eq!(page.jobs.len(), MAX_LIST_PAGE, "a reply holds one page");
    assert_eq!(page.next_after, page.jobs.last().map(|j| j.id), "the cursor is the page's last job");

    // The CLI follows the pages.
    let cfg = d.config_arg();
    let started = Instant::now();
    let (code, out, err) = run_cli(&["--config", &cfg, "jobs", "--limit", "100000", "--json"], &[]);
    let cli_time = started.elapsed();
    assert_eq!(code, 0, "jobs: {err}");
    let listed = serde_json::from_str::<ListReply>(&out).expect("the list reply, every page in one").jobs;
    ids.sort_unstable_by(|a, b| b.cmp(a));
    assert_eq!(listed.iter().map(|j| j.id).collect::<Vec<_>>(), ids, "all 5000, newest first, each once");
    eprintln!("figures: `jobs --limit 100000 --json` listed 5000 jobs in {cli_time:?}");

    // The dashboard's API pages the same way.
    flotilla_config::tls::install_crypto_provider();
    let http = reqwest::Client::builder().timeout(Duration::from_secs(30)).build().expect("http client");
    let mut seen = HashSet::new();
    let mut after: Option<JobId> = None;
    let mut pages = 0;
    loop {
        let cursor = after.map(|a| format!("&after={a}")).unwrap_or_default();
        let url = format!("http://127.0.0.1:{port}/api/jobs?limit=2000{cursor}");
        let reply: ListReply = http.get(&url).send().await.expect("dashboard").json().await.expect("a ListReply");
        assert!(reply.jobs.len() <= MAX_LIST_PAGE, "a page is capped");
        pages += 1;
        for j in &reply.jobs {
            assert!(seen.insert(j.id), "job {} on two pages", j.id);
        }
        match reply.next_after {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    assert_eq!(seen.len(), 5_000, "every job on some page");
    assert_eq!(pages, 10, "5000 jobs in pages of {MAX_LIST_PAGE}");
}

const JOB: &str = "Compute the gross margin of region north: revenue 120, cost 75.";

/// The status reply of `job`: the record, or the error (e.g. `not_found`).
async fn status(d: &Deployment, job: JobId) -> Result<JobRecord, flotilla_protocol::ErrorInfo> {
    let req =
        StatusRequest { v: SCHEMA_VERSION, job_id: job, tasks_limit: Some(1), tasks_after: None, tasks_filter: None };
    let r: ApiReply<JobRecord> =
        d.bus.request(&Tenant::default(), "status", &req, Duration::from_secs(10)).await.expect("status answered");
    r.into_result()
}

fn listed(d: &Deployment) -> Vec<JobId> {
    let cfg = d.config_arg();
    let (code, out, err) = run_cli(&["--config", &cfg, "jobs", "--limit", "1000", "--json"], &[]);
    assert_eq!(code, 0, "jobs: {err}");
    serde_json::from_str::<ListReply>(&out).expect("the list reply").jobs.into_iter().map(|j| j.id).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_past_retention_is_gone_from_listing_status_and_files() {
    // 0.0001 days = 8.6 s; the sweeper runs every second (orchestrator/src/jobs/retention.rs).
    let d = Deployment::start(1, |url| {
        let mut c = TestConfig::demo(url, 1, 0);
        c.section("[jobs]\nretention_days = 0.0001\n");
        c
    })
    .await;
    let tmp = TempDir::new("history");
    let input = tmp.path().join("notes.txt");
    std::fs::write(&input, "north: revenue 120, cost 75\n").unwrap();
    let (cfg, file) = (d.config_arg(), input.display().to_string());
    d.orchestrator_ready().await;
    let (code, out, err) = run_cli(&["--config", &cfg, "submit", "--wait", "--json", "--file", &file, JOB], &[]);
    assert_eq!(code, 0, "submit: {out}\n{err}");
    let job = serde_json::from_str::<JobRecord>(&out).expect("the final record").id;
    let finished = Instant::now();
    let files = d.bus.job_files(&FilesConfig::default()).await.unwrap();
    assert!(!files.list(&job).await.unwrap().is_empty(), "the job has its input file");
    assert!(listed(&d).contains(&job), "listed while kept");

    let e = eventually(TIMEOUT, "the finished job to expire", || async {
        status(&d, job).await.err().filter(|e| e.kind == ErrorKind::NotFound)
    })
    .await;
    let gone_after = finished.elapsed();
    eprintln!("figures: a job with retention 8.6 s was gone {gone_after:?} after it finished ({})", e.message);
    assert!(gone_after >= Duration::from_secs(8), "not before its retention: {gone_after:?}");
    assert!(!listed(&d).contains(&job), "gone from the listing");
    assert!(files.list(&job).await.unwrap().is_empty(), "its files are deleted");
    let (code, _, err) = run_cli(&["--config", &cfg, "files", "ls", &job.to_string()], &[]);
    assert_ne!(code, 0, "files ls of a pruned job fails");
    assert!(err.contains("not_found") || err.contains("no job"), "{err}");
    let records = d.bus.job_records().await.unwrap();
    assert!(records.keys(&format!("{job}.>")).await.unwrap().is_empty(), "no task, input or todo key left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prune_deletes_the_tenants_finished_jobs_only() {
    let d = Deployment::start(0, |url| TestConfig::demo(url, 1, 0)).await;
    d.orchestrator_ready().await;
    let (records, index) = (d.bus.job_records().await.unwrap(), d.bus.job_index().await.unwrap());
    let finished = write_finished(&records, &index, 3).await;
    // A running job of the same tenant (no worker serves it) stays.
    let running = d.submit(JOB).await;
    // Every job has files; the pruned ones' go in one batch, the running one's stay.
    let files = d.bus.job_files(&FilesConfig::default()).await.unwrap();
    let note = flotilla_job_files::FilePath::parse("/notes.md").unwrap();
    for job in finished.iter().chain([&running]) {
        files.write(job, &note, b"kept until the job is pruned").await.unwrap();
    }
    let cfg = d.config_arg();
    let (code, out, err) = run_cli(&["--config", &cfg, "jobs", "prune", "--before", "2999-01-01"], &[]);
    assert_eq!(code, 0, "prune: {err}");
    assert!(out.contains("3 finished jobs deleted"), "{out}");
    for job in &finished {
        assert_eq!(status(&d, *job).await.expect_err("pruned").kind, ErrorKind::NotFound);
        assert!(files.list(job).await.unwrap().is_empty(), "a pruned job's files are deleted");
    }
    assert_eq!(listed(&d), vec![running], "only the running job is left");
    assert_eq!(files.list(&running).await.unwrap().len(), 1, "the running job's file is kept");
}

/// The value of metric line `key` (`name{labels}`) at the orchestrator's `/metrics`, 0 when absent.
async fn scrape(http: &reqwest::Client, port: u16, key: &str) -> f64 {
    let text =
        http.get(format!("http://127.0.0.1:{port}/metrics")).send().await.expect("metrics").text().await.unwrap();
    text.lines()
        .filter_map(|l| l.rsplit_once(' '))
        .find(|(k, _)| *k == key)
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0.0)
}

/// Resident set size of process `pid` in KiB (`VmRSS` of /proc/<pid>/status).
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).expect("VmRSS");
    line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).expect("a number")
}

/// Submits `n` demo jobs, 50 at a time, and waits until `total` jobs have completed.
async fn run_jobs(d: &Deployment, http: &reqwest::Client, port: u16, n: usize, total: usize) {
    futures::stream::iter(0..n).map(|_| d.submit(JOB)).buffer_unordered(50).collect::<Vec<_>>().await;
    let key = "flotilla_jobs_total{status=\"completed\"}";
    eventually(Duration::from_secs(600), &format!("{total} jobs to complete"), || async {
        (scrape(http, port, key).await as usize >= total).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_jobs_leave_no_job_in_memory_and_rss_flat() {
    let port = free_port();
    let d = Deployment::start(2, |url| {
        let mut c = TestConfig::demo(url, 4, 0);
        c.section(&format!("[metrics]\norchestrator = \"127.0.0.1:{port}\"\n"));
        // One tenant submitting a thousand jobs at once: above the default API rate.
        c.section("[tenants]\napi_rate = 100000\napi_burst = 100000\nmax_queued_jobs = 100000\n");
        c
    })
    .await;
    flotilla_config::tls::install_crypto_provider();
    let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().expect("http client");
    let pid = d.orchestrator.as_ref().expect("orchestrator").pid();
    let before = rss_kib(pid);
    run_jobs(&d, &http, port, 100, 100).await;
    let warm = rss_kib(pid);
    let started = Instant::now();
    run_jobs(&d, &http, port, 1_000, 1_100).await;
    let took = started.elapsed();
    let in_memory = scrape(&http, port, "flotilla_jobs_in_memory").await;
    let after = rss_kib(pid);
    eprintln!(
        "figures: orchestrator RSS {before} KiB at start, {warm} KiB after 100 warm-up jobs, {after} KiB after 1000 more ({:+.1} %; debug build, 2 workers, demo jobs, 1000 in {took:?}); job records in memory after: {in_memory}",
        (after as f64 / warm as f64 - 1.0) * 100.0
    );
    let completed = scrape(&http, port, "flotilla_jobs_total{status=\"completed\"}").await;
    assert_eq!(completed, 1_100.0, "each job completed once: a finished job is never planned again");
    assert_eq!(in_memory, 0.0, "every finished job left the job store's memory");
    assert!(after as f64 <= warm as f64 * 1.10, "RSS grew more than 10 % over 1000 jobs: {warm} -> {after} KiB");
}

/// Jobs stored before the index existed (headers only, no index entry) are
/// filed once, by the first orchestrator that starts with an index, and
/// then listed like any other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_stored_before_the_index_are_filed_at_the_next_start() {
    let mut d = Deployment::start(0, |url| TestConfig::demo(url, 1, 0)).await;
    d.orchestrator_ready().await;
    d.orchestrator = None; // SIGKILLed
    let records = d.bus.job_records().await.unwrap();
    let old: Vec<JobId> = (0..3).map(|_| JobId::new()).collect();
    for id in &old {
        let mut rec = JobRecord::new(*id, Tenant::default(), format!("pre-index job {id}"));
        rec.status = JobStatus::Completed;
        records.create(&flotilla_bus::job_keys::header(id), flotilla_protocol::encode(&rec).into()).await.unwrap();
    }
    // As a store from before the index: no entries, no "indexed" marker.
    let index = d.raw.js.get_key_value("flotilla_jobs_index").await.expect("index bucket");
    index.purge("meta.backfilled").await.unwrap();
    let entries = d.bus.job_index().await.unwrap().entries(None, None).await.unwrap();
    assert!(entries.is_empty(), "not indexed yet: {entries:?}");

    d.start_orchestrator();
    d.orchestrator_ready().await;
    let mut want = old.clone();
    want.sort_unstable_by(|a, b| b.cmp(a));
    assert_eq!(listed(&d), want, "every pre-index job is listed, newest first");
    let completed = ListRequest { v: SCHEMA_VERSION, status: Some(JobStatus::Completed), ..Default::default() };
    assert_eq!(list(&d, &completed).await.jobs.len(), 3, "filed under their status");
    let log = d.orchestrator.as_ref().unwrap().log();
    assert!(log.contains("job index built from the jobs bucket"), "{log}");
}

/// What a job page's task view reads after its first pass
/// (orchestrator/src/jobs/task_views.rs): `changes` on the real jobs bucket
/// gives every live key once, then only the writes after the revision it
/// returned, in order, with deletions; nothing written is missed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_changes_after_a_revision_are_exactly_the_writes_since() {
    use bytes::Bytes;
    use flotilla_bus::{Cas, job_keys};
    use flotilla_protocol::ids::TaskId;
    let d = Deployment::start(0, |url| TestConfig::demo(url, 1, 0)).await;
    let records = d.bus.job_records().await.unwrap();
    let job = JobId::new();
    let ids: Vec<TaskId> = (0..300).map(|_| TaskId::new()).collect();
    for (i, t) in ids.iter().enumerate() {
        let key = job_keys::task(&job, t);
        let Cas::Stored(rev) = records.create(&key, Bytes::from(format!("v1 {i}"))).await.unwrap() else {
            panic!("created")
        };
        // Every task written twice, as a dispatch then a report would.
        records.update(&key, Bytes::from(format!("v2 {i}")), rev).await.unwrap();
    }
    let filter = job_keys::tasks(&job);
    let first = records.changes(&filter, 0, false).await.unwrap();
    assert_eq!(first.entries.len(), 300, "the last revision of each key, once");
    assert!(first.entries.iter().all(|(_, v)| v.as_ref().is_some_and(|v| v.starts_with(b"v2"))));
    let again = records.changes(&filter, first.last, true).await.unwrap();
    assert!(again.entries.is_empty(), "nothing written since: {:?}", again.entries);
    assert_eq!(again.last, first.last);

    let (changed, added) = (job_keys::task(&job, &ids[7]), job_keys::task(&job, &TaskId::new()));
    let (_, rev) = records.entry(&changed).await.unwrap().unwrap();
    records.update(&changed, Bytes::from_static(b"v3"), rev).await.unwrap();
    records.create(&added, Bytes::from_static(b"v1 new")).await.unwrap();
    let since = records.changes(&filter, first.last, false).await.unwrap();
    let keys: Vec<&str> = since.entries.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, [changed.as_str(), added.as_str()], "the two writes since, in order");
    assert!(since.last > first.last);

    records.remove_job(&job).await.unwrap();
    let gone = records.changes(&filter, since.last, true).await.unwrap();
    assert!(gone.entries.iter().all(|(_, v)| v.is_none()), "a purge reads as deletions: {:?}", gone.entries);
}
