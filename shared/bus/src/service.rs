//! The standard NATS service API (`$SRV.PING`, `$SRV.INFO`, `$SRV.STATS`, each
//! also per name and per instance), so generic NATS tooling and
//! `flotilla`-independent monitors discover a fleet's workers: each worker
//! answers as one instance of service `flotilla-worker`, with its worker id,
//! host and served types in the metadata (docs/OPERATIONS.md).

use std::collections::HashMap;

use async_nats::service::{Service, ServiceExt};

use crate::{Bus, BusError};

impl Bus {
    /// Announces this process as an instance of service `name` (version
    /// `version`, semver) until the returned announcement is stopped or dropped.
    pub async fn announce_service(
        &self,
        name: &str,
        version: &str,
        description: &str,
        metadata: HashMap<String, String>,
    ) -> Result<Announcement, BusError> {
        self.client
            .service_builder()
            .description(description)
            .metadata(metadata)
            .start(name, version)
            .await
            .map(Announcement)
            .map_err(|e| BusError::new(format!("cannot announce service {name} on $SRV"), e))
    }
}

/// A running service announcement ([`Bus::announce_service`]).
pub struct Announcement(Service);

impl Announcement {
    /// Stops answering `$SRV` requests.
    pub async fn stop(self) {
        if let Err(e) = self.0.stop().await {
            tracing::debug!(error = %e, "service announcement not stopped cleanly");
        }
    }
}
