//! `job_status` with `wait_seconds`: the call waits for the job to end (or
//! the time to pass) by following the job's events, as `flotilla submit
//! --wait` does (`EndWatch`, shared/client/src/events.rs), and sends one MCP
//! progress notification per event when the host asked for progress (a
//! `progressToken` in the request's `_meta`). The message is the event's
//! line as `flotilla watch` prints it, so the host can show what the fleet
//! is doing while it waits (docs/MCP.md, "Use Flotilla from an MCP host").

use std::time::Duration;

use flotilla_client::{Client, EndWatch, Event, Scope, render};
use flotilla_protocol::ids::JobId;
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::{Peer, RoleServer};

/// The longest a call may wait: MCP hosts commonly time a request out
/// after 60 s.
pub const MAX_WAIT: Duration = Duration::from_secs(60);

/// Where to send progress: the request's token and the host.
pub type Progress = (ProgressToken, Peer<RoleServer>);

/// Returns once `job` has ended or `within` has passed; how many of its
/// events were seen (each one sent as progress when `progress` is given).
pub async fn until_done(api: &Client, job: JobId, within: Duration, progress: Option<Progress>) -> anyhow::Result<u64> {
    if api.status(job).await?.status.is_terminal() {
        return Ok(0);
    }
    let scope = Scope::Job(api.tenant().clone(), job);
    let (_, events) = api.follow_counted(scope, true).await?;
    let mut events = std::pin::pin!(events);
    let mut ends = EndWatch::new(api, job, true);
    let deadline = tokio::time::sleep(within.min(MAX_WAIT));
    tokio::pin!(deadline);
    let mut seen = 0u64;
    loop {
        let ev = tokio::select! {
            _ = &mut deadline => return Ok(seen),
            ev = ends.next(&mut events) => ev?,
        };
        let Some(ev) = ev else { return Ok(seen) };
        seen += 1;
        if let Some((token, peer)) = &progress {
            let note = ProgressNotificationParam::new(token.clone(), seen as f64).with_message(render::event(&ev));
            if let Err(e) = peer.notify_progress(note).await {
                tracing::debug!(%job, "progress notification not sent: {e}");
            }
        }
        if let Event::Job(j) = &ev
            && j.kind.is_terminal()
        {
            return Ok(seen);
        }
    }
}
