//! The operator console's pages against a real deployment: a job's
//! progress, its task table filtered, a task's step timeline and report,
//! its files tab (list, download, upload), the workers, queues and
//! approvals pages; then the same pages driven in headless Chromium.
//! With `FLOTILLA_SCREENSHOTS=<dir>` each page is also saved as a PNG
//! there (docs/img holds the ones docs/OPERATIONS.md shows).

use super::*;

const DEMO_JOB: &str = "Compute the gross margin of each region and consolidate them into one table: \
                        north: revenue 120, cost 75; south: revenue 0, cost 30; east: revenue 250, cost 190; \
                        west: revenue 80, cost 20.";

async fn page(http: &reqwest::Client, url: &str) -> String {
    let r = http.get(url).send().await.expect("GET");
    assert_eq!(r.status(), StatusCode::OK, "GET {url}");
    r.text().await.unwrap()
}

/// The `data-task` ids of a page's task rows, with their `data-status`.
fn task_rows(html: &str) -> Vec<(String, String)> {
    html.split("<tr class=\"task\" data-task=\"")
        .skip(1)
        .map(|row| {
            let id = row.split('"').next().unwrap().to_string();
            let status = row.split("data-status=\"").nth(1).unwrap().split('"').next().unwrap().to_string();
            (id, status)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_shows_a_jobs_progress_tasks_steps_files_and_the_fleet() {
    let port = free_port();
    let d = Deployment::start(1, |url| {
        let mut c = TestConfig::demo(url, 1, 0);
        c.section(&format!("[dashboard]\nlisten = \"127.0.0.1:{port}\"\n"));
        c
    })
    .await;
    d.orchestrator_ready().await;
    let base = format!("http://127.0.0.1:{port}");
    let http = client();
    let job = d.submit(DEMO_JOB).await;
    let done = eventually(TIMEOUT, "the demo job to end", || async {
        Some(d.status(job).await).filter(|r| r.status.is_terminal())
    })
    .await;
    assert_eq!(done.status, JobStatus::Completed);

    // Progress: four tasks, all ended (south's tool call failed, its task completed).
    let html = page(&http, &format!("{base}/jobs/{job}")).await;
    assert!(html.contains(r#"data-planned="4" data-completed="4" data-failed="0""#), "{html}");
    assert!(html.contains(r#"aria-valuenow="4""#), "{html}");
    assert_eq!(task_rows(&html).len(), 4, "{html}");

    // The task table filtered by state, then by text.
    let completed = page(&http, &format!("{base}/jobs/{job}?state=completed&tasks=2")).await;
    assert_eq!(task_rows(&completed).len(), 2, "a page of two: {completed}");
    assert!(completed.contains(r#"<b id="matched">4</b> match"#), "{completed}");
    assert!(completed.contains("?state=completed&amp;after="), "the next page keeps the filter: {completed}");
    let failed = page(&http, &format!("{base}/jobs/{job}?state=failed")).await;
    assert!(task_rows(&failed).is_empty() && failed.contains("no task matches"), "{failed}");
    let by_text = page(&http, &format!("{base}/jobs/{job}?q=SOUTH")).await;
    let south_rows = task_rows(&by_text);
    assert_eq!(south_rows.len(), 1, "{by_text}");
    let south = &south_rows[0].0;
    let r = http.get(format!("{base}/jobs/{job}?state=lost")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert!(r.text().await.unwrap().contains("not one of pending, running"), "a bad filter says what it takes");

    // A task's timeline and full report.
    let task = page(&http, &format!("{base}/jobs/{job}/tasks/{south}")).await;
    for event in ["started", "model_call", "tool_call", "tool_result", "finished"] {
        assert!(task.contains(&format!(r#"data-event="{event}""#)), "{event} in the timeline: {task}");
    }
    assert!(task.contains("failed: business"), "the failed tool call is marked: {task}");
    assert!(task.contains(r#"id="report""#) && task.contains("south"), "{task}");

    // Files: the report is listed and downloads as the file it is; an upload lands.
    let report_path = format!("/reports/{south}.md");
    let files = page(&http, &format!("{base}/jobs/{job}/files?prefix=/reports/")).await;
    assert!(files.contains(&format!("{south}.md")), "{files}");
    let got = http.get(format!("{base}/api/jobs/{job}/files/content?path={report_path}")).send().await.unwrap();
    assert_eq!(got.status(), StatusCode::OK);
    assert!(got.headers()["content-disposition"].to_str().unwrap().starts_with("attachment"));
    let bytes = got.bytes().await.unwrap();
    let (stored, _) = d.client().download(job, &report_path).await.unwrap();
    assert_eq!(bytes.as_ref(), stored.as_slice());
    let put = http.post(format!("{base}/api/jobs/{job}/files?path=/inputs/notes.txt")).body("west looks good\n");
    let (status, reply) = send(put).await;
    assert_eq!(status, StatusCode::CREATED, "{reply}");
    let (bytes, _) = d.client().download(job, "/inputs/notes.txt").await.unwrap();
    assert_eq!(bytes, b"west looks good\n");
    let (status, reply) = send(http.post(format!("{base}/api/jobs/{job}/files?path={report_path}")).body("x")).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "a report cannot be overwritten: {reply}");

    // The fleet: the worker with its memory, the finance queue, an empty inbox.
    let workers = page(&http, &format!("{base}/workers")).await;
    assert!(workers.contains(r#"data-worker="w1""#) && workers.contains(" MiB"), "{workers}");
    assert!(workers.contains("finance 0/"), "{workers}");
    let queues = page(&http, &format!("{base}/queues")).await;
    assert!(queues.contains(r#"data-type="finance" data-pending="0""#), "{queues}");
    let inbox = page(&http, &format!("{base}/approvals")).await;
    assert!(inbox.contains(r#"id="inbox-empty""#), "{inbox}");
    let (status, listed) = send(http.get(format!("{base}/api/queues"))).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(listed[0]["subagent_type"], "finance", "{listed}");

    // In a browser: the job page's progress, a filter, a task's timeline, a download.
    let shots = std::env::var("FLOTILLA_SCREENSHOTS").ok();
    let mut browser = tokio::task::block_in_place(|| browser::Browser::start(&chromium()));
    tokio::task::block_in_place(|| {
        let shot = |b: &mut browser::Browser, name: &str| {
            if let Some(dir) = &shots {
                b.screenshot(&std::path::Path::new(dir).join(format!("console-{name}.png")));
            }
        };
        browser.open(&format!("{base}/jobs/{job}"));
        browser.until(TIMEOUT, "the progress bar", "document.getElementById('done-count').textContent === '4' && document.getElementById('live').textContent === 'ended' && document.getElementById('tokens-line').getAttribute('points') !== ''");
        shot(&mut browser, "job");
        let pick =
            "document.getElementById('f-q').value = 'south'; document.getElementById('apply-filter').click(); true";
        assert_eq!(browser.eval(pick), Some(Value::Bool(true)));
        browser.until(
            TIMEOUT,
            "the filtered table",
            "location.search.endsWith('q=south') && document.querySelectorAll('tr.task').length === 1",
        );
        assert_eq!(browser.eval("document.querySelector('tr.task').dataset.task"), Some(json!(south)));
        assert_eq!(browser.eval("document.querySelector('a.task-link').click(); true"), Some(Value::Bool(true)));
        browser.until(TIMEOUT, "the task's timeline", "document.querySelectorAll('#steps tr.step').length >= 4");
        shot(&mut browser, "task");
        let download = "fetch(document.getElementById('report-download').href).then(r => r.text())";
        let text = browser.eval(download).and_then(|v| v.as_str().map(String::from)).expect("the report downloads");
        assert_eq!(text.as_bytes(), stored.as_slice());
        browser.open(&format!("{base}/jobs/{job}/files"));
        browser.until(TIMEOUT, "the files tab", "document.querySelectorAll('tr.file').length >= 5");
        shot(&mut browser, "files");
        browser.open(&format!("{base}/workers"));
        browser.until(TIMEOUT, "the workers page", "!!document.querySelector('tr.worker[data-worker=w1]')");
        // The fleet stream's second sample draws the chart.
        browser.until(TIMEOUT, "the fleet chart", "document.getElementById('rate-line').getAttribute('points') !== ''");
        shot(&mut browser, "workers");
        browser.open(&format!("{base}/queues"));
        browser.until(TIMEOUT, "the queues page", "!!document.querySelector('tr.queue[data-type=finance]')");
        shot(&mut browser, "queues");
        // A narrow window (a phone's 375 px): each page fits its width; wide
        // tables scroll inside their own box, not the page.
        browser.viewport(375, 800);
        for (path, ready) in [
            (format!("/jobs/{job}"), "document.getElementById('done-count').textContent === '4'"),
            (format!("/jobs/{job}/tasks/{south}"), "document.querySelectorAll('#steps tr.step').length >= 4"),
            (format!("/jobs/{job}/files"), "document.querySelectorAll('tr.file').length >= 5"),
            ("/workers".to_string(), "!!document.querySelector('tr.worker[data-worker=w1]')"),
            ("/queues".to_string(), "!!document.querySelector('tr.queue[data-type=finance]')"),
            ("/approvals".to_string(), "!!document.getElementById('inbox-empty')"),
        ] {
            browser.open(&format!("{base}{path}"));
            browser.until(TIMEOUT, &path, ready);
            assert_eq!(browser.eval("window.innerWidth"), Some(json!(375)), "the window is narrow");
            let fits = "document.documentElement.scrollWidth <= window.innerWidth";
            assert_eq!(browser.eval(fits), Some(Value::Bool(true)), "{path} is wider than a 375 px window");
        }
    });
}

/// How long the 1 000-item map may take to start and to end.
const MAP_TIMEOUT: Duration = Duration::from_secs(300);

/// A 1 000-item map watched in the browser while it runs: the bar counts
/// the map's items before they are dispatched, its done count moves, a
/// filter over the running job's tasks holds only matching rows, and the
/// bar fills when the map is done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_chromium_a_running_1000_item_map_shows_its_progress_moving() {
    use flotilla_testkit::scripts::{MAP_PLANNER, finance_margin, region_items};
    let port = free_port();
    let d = Deployment::start(1, |url| {
        let mut c = TestConfig::new(url);
        c.scripted_model("planner", MAP_PLANNER);
        c.scripted_model("finance", &finance_margin(40));
        c.section("[planner]\nmodel = \"planner\"\ntask_timeout = 900\nmax_in_flight = 64\n");
        c.section(
            "[subagents.finance]\ndescription = \"Computes gross margins.\"\nmodel = \"finance\"\n\
             tools = [\"calculate_margin\"]\nconcurrency = 16\n",
        );
        c.section(&format!("[dashboard]\nlisten = \"127.0.0.1:{port}\"\n"));
        c
    })
    .await;
    d.orchestrator_ready().await;
    let base = format!("http://127.0.0.1:{port}");
    let items = region_items(1000);
    let body = json!({
        "input": "Gross margin of every region in /inputs/regions.jsonl",
        "files": [{"path": "/inputs/regions.jsonl", "content_base64": base64(items.as_bytes())}],
    });
    let (status, created) = send(client().post(format!("{base}/api/jobs")).json(&body)).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let job = created["job_id"].as_str().unwrap().to_string();

    let mut browser = tokio::task::block_in_place(|| browser::Browser::start(&chromium()));
    tokio::task::block_in_place(|| {
        browser.open(&format!("{base}/jobs/{job}"));
        let done = "+document.getElementById('done-count').textContent";
        let running =
            format!("document.getElementById('planned-count').textContent === '1000' && {done} > 0 && {done} < 1000");
        browser.until(MAP_TIMEOUT, "the map under way, its 1 000 items planned", &running);
        let first = browser.eval(done).and_then(|v| v.as_f64()).expect("a done count");
        browser.until(TIMEOUT, "the done count to move", &format!("{done} > {first}"));
        // While it runs: only completed tasks under the filter.
        browser.open(&format!("{base}/jobs/{job}?state=completed"));
        browser.until(TIMEOUT, "the filtered table", "document.querySelectorAll('tr.task').length > 0");
        assert_eq!(
            browser.eval("[...document.querySelectorAll('tr.task')].every(r => r.dataset.status === 'completed')"),
            Some(Value::Bool(true))
        );
        browser.open(&format!("{base}/jobs/{job}"));
        // 1 000 tasks on 16 slots take a while on a loaded debug build.
        browser.until(MAP_TIMEOUT, "the map done", &format!("{done} === 1000"));
    });
}

/// The event names of an open SSE response, read to its end.
async fn read_to_end(mut sse: reqwest::Response) -> Vec<String> {
    assert_eq!(sse.status(), StatusCode::OK);
    let mut text = String::new();
    let read = async {
        while let Some(chunk) = sse.chunk().await.expect("the SSE stream") {
            text.push_str(&String::from_utf8_lossy(&chunk));
        }
    };
    assert!(tokio::time::timeout(TIMEOUT, read).await.is_ok(), "the stream ends with the job; so far:\n{text}");
    text.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str::<Value>(d).unwrap()["event"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// `?live=1` (what the page of a job of more than 2 000 tasks follows)
/// starts at the moment of the request: none of the events stored before
/// it is replayed, the ones after it all arrive, and the stream still ends
/// with the job. The job waits for a worker that starts only once the live
/// stream is open, so "before" and "after" are events, not times.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_jobs_page_follows_its_events_from_now_without_replaying_them() {
    let port = free_port();
    let mut d = Deployment::start(0, |url| {
        let mut c = TestConfig::demo(url, 1, 0);
        c.section(&format!("[dashboard]\nlisten = \"127.0.0.1:{port}\"\n"));
        c
    })
    .await;
    d.orchestrator_ready().await;
    let base = format!("http://127.0.0.1:{port}");
    let job = d.submit(DEMO_JOB).await;
    eventually(TIMEOUT, "the planner to dispatch the four tasks", || async {
        Some(d.status(job).await).filter(|r| r.tasks_total >= 4)
    })
    .await;
    // No total timeout on this client: a stream lasts as long as its job.
    flotilla_config::tls::install_crypto_provider();
    let streaming = reqwest::Client::new();
    // The response's headers come once its consumer exists (the dashboard's
    // `job_events` follows before it answers), so every event published
    // after `send` returns reaches this stream.
    let live = streaming.get(format!("{base}/api/jobs/{job}/events?live=1")).send().await.expect("GET live events");
    d.add_worker("w1");
    let live_kinds = read_to_end(live).await;
    let replayed = read_to_end(streaming.get(format!("{base}/api/jobs/{job}/events")).send().await.unwrap()).await;
    assert_eq!(replayed.first().map(String::as_str), Some("submitted"), "{replayed:?}");
    for stored in ["submitted", "task_dispatched"] {
        assert!(replayed.iter().any(|k| k == stored), "the full stream has {stored}: {replayed:?}");
        assert!(!live_kinds.iter().any(|k| k == stored), "{stored} came before the live stream: {live_kinds:?}");
    }
    for later in ["started", "finished", "task_reported"] {
        assert!(live_kinds.iter().any(|k| k == later), "{later} came after: {live_kinds:?}");
    }
    assert_eq!(live_kinds.last().map(String::as_str), Some("completed"), "{live_kinds:?}");
}
