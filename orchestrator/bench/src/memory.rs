//! Worker and orchestrator memory with models that report their own usage
//! (an `openai` provider on a local OpenAI-format endpoint,
//! tests/kit/src/metered.rs), the way production processes run: the idle
//! orchestrator's RSS, and the worker's idle (and the anonymous part of it,
//! what one more worker on a host adds) and with 16 subagents in flight
//! (each inside one 2 s model call), so memory per in-flight subagent is
//! the difference over 16. The scripted rows of `footprint` differ: a
//! scripted model counts every request in o200k tokens, so that worker
//! builds the tokenizer's tables at start.

use std::sync::Arc;
use std::time::{Duration, Instant};

use flotilla_bus::FollowUps;
use flotilla_protocol::ids::{JobId, SubagentType};
use flotilla_testkit::chat_endpoint::text_reply;
use flotilla_testkit::metered::MeteredEndpoint;

use crate::setup::{self, FinanceModel, Rig};
use crate::{Row, task};

/// In-flight subagents of the loaded measurement.
const IN_FLIGHT: usize = 16;

/// The rows: idle RSS, RSS and peak with 16 in flight, and per subagent.
pub async fn measure() -> anyhow::Result<Vec<Row>> {
    let endpoint = MeteredEndpoint::start(Duration::from_secs(2), Arc::new(|_| text_reply("0.375"))).await;
    let planner = setup::planner(0);
    let rig = Rig::launch(1, |url| {
        let mut c = setup::config_with(url, &planner, FinanceModel::OpenAi(&endpoint.url), IN_FLIGHT, "");
        // The planner on the endpoint too, as a production orchestrator
        // runs: a scripted planner counts every request in o200k tokens,
        // so it builds the tokenizer's tables at start. Idle, it is not called.
        let scripted = "[models.planner]\nprovider = \"scripted\"\nscript = \"planner.toml\"\n";
        let openai = format!(
            "[models.planner]\nprovider = \"openai\"\nbase_url = \"{}\"\nmodel = \"m\"\nmax_retries = 0\n",
            endpoint.url
        );
        c.section_replace(scripted, &openai);
        c
    })
    .await?;
    let idle = rig.memory_kib("worker-1", "VmRSS:")?;
    let idle_anonymous = rig.proc_kib("worker-1", "smaps_rollup", "Anonymous:")?;
    let idle_orchestrator = rig.memory_kib("orchestrator", "VmRSS:")?;
    let job = JobId::new();
    let ty = SubagentType::new("finance")?;
    for _ in 0..IN_FLIGHT {
        rig.bus().tasks().publish(&task(job, &ty), FollowUps::None).await?;
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while endpoint.meter().waiting.len() < IN_FLIGHT {
        anyhow::ensure!(Instant::now() < deadline, "the tasks did not reach the model; logs: {}", rig.logs());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let loaded = rig.memory_kib("worker-1", "VmRSS:")?;
    let peak = rig.memory_kib("worker-1", "VmHWM:")?;
    rig.stop();
    let mib = |kib: u64| format!("{:.1} MiB", kib as f64 / 1024.0);
    Ok(vec![
        ("idle worker RSS, openai-provider model (no o200k tables)".into(), mib(idle), "<= 20 MiB".into()),
        (
            "  of it anonymous (the rest: the binary's pages, shared by the workers of a host)".into(),
            mib(idle_anonymous),
            String::new(),
        ),
        (
            "idle orchestrator RSS, openai-provider planner (no o200k tables)".into(),
            mib(idle_orchestrator),
            "<= 30 MiB".into(),
        ),
        (
            format!("worker RSS, {IN_FLIGHT} subagents in flight (peak)"),
            format!("{} ({})", mib(loaded), mib(peak)),
            "<= 40 MiB".into(),
        ),
        (
            "memory per in-flight subagent (RSS over idle / 16)".into(),
            format!("{:.0} KiB", loaded.saturating_sub(idle) as f64 / IN_FLIGHT as f64),
            String::new(),
        ),
    ])
}
