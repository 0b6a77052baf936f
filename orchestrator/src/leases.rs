//! Job ownership among any number of orchestrators sharing one prefix
//! (docs/RELIABILITY.md, "Job leases").
//!
//! An orchestrator plans a job only while it holds the job's lease
//! (shared/bus/src/leases.rs): it takes the lease before the planner's
//! first step, renews it every third of `[planner] lease_ttl`, and gives
//! it back when the job ends or the orchestrator stops. If a renewal finds
//! the lease gone or taken (this process stalled, or lost NATS for longer
//! than the TTL), the holder is fenced: [`Held::fenced`] fires and the planner
//! stops at its next step, leaving the job `running` for its new owner, which
//! resumes it from its checkpoint.

use std::time::Duration;

use flotilla_bus::{Bus, BusError, Lease, Leases};
use flotilla_protocol::ids::JobId;
use tokio_util::sync::CancellationToken;

/// This orchestrator's side of the leases.
#[derive(Clone)]
pub struct Ownership {
    leases: Leases,
    /// The id this orchestrator holds leases under.
    pub owner: String,
    ttl: Duration,
}

/// A lease this orchestrator holds, kept alive until released or lost.
pub struct Held {
    lease: Lease,
    leases: Leases,
    fenced: CancellationToken,
    keeper: tokio::task::JoinHandle<()>,
}

impl Ownership {
    /// Opens the lease bucket; `owner` names this orchestrator.
    pub async fn open(bus: &Bus, owner: String, ttl: Duration) -> Result<Self, BusError> {
        Ok(Self { leases: bus.leases().await?, owner, ttl })
    }

    /// How long a lease outlives its holder's last renewal.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The holder of `job`'s lease, if any.
    pub async fn owner_of(&self, job: &JobId) -> Result<Option<String>, BusError> {
        self.leases.owner(job).await
    }

    /// Takes the lease of `job`; `None` when another orchestrator holds it.
    pub async fn take(&self, job: JobId) -> Result<Option<Held>, BusError> {
        let Some(lease) = self.leases.acquire(&job, &self.owner, self.ttl).await? else {
            return Ok(None);
        };
        let fenced = CancellationToken::new();
        let keeper = tokio::spawn(keep(self.leases.clone(), lease.clone(), self.ttl, fenced.clone()));
        Ok(Some(Held { lease, leases: self.leases.clone(), fenced, keeper }))
    }
}

impl Held {
    /// Fires when the lease is lost: stop before the next write.
    pub fn fenced(&self) -> CancellationToken {
        self.fenced.clone()
    }

    /// Stops renewing and gives the lease back, so another orchestrator may
    /// take the job at once instead of after the TTL.
    pub async fn release(self) {
        self.keeper.abort();
        let _ = self.keeper.await;
        if self.fenced.is_cancelled() {
            return; // no longer ours to give back
        }
        if let Err(e) = self.leases.release(&self.lease).await {
            tracing::warn!(job_id = %self.lease.job, error = %e, "lease not released; it expires by itself");
        }
    }
}

/// Renews `lease` every third of `ttl` until the task is aborted; fires
/// `fenced` once the lease is lost, or once renewals have failed for so long
/// that it may have expired.
async fn keep(leases: Leases, mut lease: Lease, ttl: Duration, fenced: CancellationToken) {
    let every = ttl / 3;
    let mut last_renewed = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(every).await;
        match leases.renew(&mut lease, ttl).await {
            Ok(true) => last_renewed = tokio::time::Instant::now(),
            Ok(false) => {
                tracing::warn!(job_id = %lease.job, "job lease lost to another orchestrator: planner fenced");
                return fenced.cancel();
            }
            // Past two thirds of the TTL without a renewal, another
            // orchestrator may take the job any moment: stop first.
            Err(e) if last_renewed.elapsed() + every >= ttl => {
                tracing::warn!(job_id = %lease.job, error = %e, "job lease not renewed in time: planner fenced");
                return fenced.cancel();
            }
            Err(e) => tracing::warn!(job_id = %lease.job, error = %e, "job lease renewal failed; retrying"),
        }
    }
}
