//! Whether a sandbox config works on this host, asked before anything is
//! deployed (`flotilla config check`, docs/CONFIG.md "Checking a config"):
//! the sandbox is started exactly as a worker starts it ([`Sandbox::start`]:
//! binaries resolved, scratch root and run dir usable, a uid of the range
//! leased when running as root, and one full bubblewrap sandbox, seccomp
//! filter and scratch dir included, running `true`), then dropped.

use flotilla_config::SandboxConfig;

use crate::{Sandbox, SandboxError};

/// Why a sandbox config cannot work here, and what to do about it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ProbeError {
    /// What was found.
    pub message: String,
    /// The fix.
    pub fix: String,
}

/// Starts the sandbox of subagent type `ty` once, as its worker would
/// (blocking: it runs a process), and tells why it cannot work.
pub fn probe(ty: &str, config: &SandboxConfig) -> Result<(), ProbeError> {
    let err = match Sandbox::start(ty, config) {
        Ok(_) => return Ok(()),
        Err(e) => e,
    };
    let Some(cause) = err.chain().find_map(|e| e.downcast_ref::<SandboxError>()) else {
        // The worker's own setup (scratch root, run dir, uid range): the
        // message names the key to change.
        return Err(ProbeError { message: format!("{err:#}"), fix: "see docs/SANDBOX.md".into() });
    };
    let fix = match cause {
        SandboxError::Missing { hint, .. } => hint.to_string(),
        SandboxError::Unusable(_) => {
            "allow unprivileged user namespaces (e.g. sysctl kernel.unprivileged_userns_clone=1), see docs/SANDBOX.md"
                .into()
        }
        _ => "see docs/SANDBOX.md".into(),
    };
    Err(ProbeError { message: cause.to_string(), fix })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// bubblewrap is installed on the test machines (scripts/install-deps):
    /// the default sandbox runs, and a missing bwrap names the fix.
    #[test]
    fn the_default_sandbox_runs_and_a_missing_bwrap_is_named() {
        probe("t", &SandboxConfig::default()).expect("bubblewrap works here");
        let bad = SandboxConfig { bwrap: "/nonexistent/bwrap".into(), ..Default::default() };
        let ProbeError { message, fix } = probe("t", &bad).expect_err("no such bwrap");
        assert!(message.contains("/nonexistent/bwrap") && fix.contains("bubblewrap"), "{message} / {fix}");
    }

    /// A scratch root that is a file fails the worker's own setup, before
    /// bubblewrap: the message names the key to change.
    #[test]
    fn a_scratch_root_that_is_not_a_directory_names_its_key() {
        let file = std::env::temp_dir().join(format!("flotilla-probe-{}", std::process::id()));
        std::fs::write(&file, b"").unwrap();
        let bad = SandboxConfig { scratch_root: Some(file.clone()), ..Default::default() };
        let ProbeError { message, .. } = probe("t", &bad).expect_err("a file is no scratch root");
        std::fs::remove_file(&file).unwrap();
        assert!(message.contains("subagents.t.sandbox.scratch_root"), "{message}");
    }
}
