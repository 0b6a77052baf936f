//! The machine's name, looked up once per process. The one hostname lookup of
//! Flotilla: a worker's heartbeats, default worker id and metrics
//! URL (workers/src/heartbeat.rs, workers/src/main.rs) and an orchestrator's
//! lease holder id (orchestrator/src/service.rs) all name the host the same
//! way, so an operator can match them to each other and to the machine.

use std::sync::OnceLock;

/// The host name: `HOSTNAME` when set (containers and shells export it),
/// else `/etc/hostname`, else the kernel's (`gethostname`), else `unknown`.
/// Blank values are skipped and the result is trimmed.
pub fn host_name() -> &'static str {
    static HOST: OnceLock<String> = OnceLock::new();
    HOST.get_or_init(|| pick(&[from_env, from_file, from_kernel]))
}

fn from_env() -> Option<String> {
    std::env::var("HOSTNAME").ok()
}

fn from_file() -> Option<String> {
    std::fs::read_to_string("/etc/hostname").ok()
}

fn from_kernel() -> Option<String> {
    nix::unistd::gethostname().ok()?.into_string().ok()
}

/// The first non-blank answer of `sources` (trimmed), asked in order; else `unknown`.
fn pick(sources: &[fn() -> Option<String>]) -> String {
    sources
        .iter()
        .find_map(|source| source().map(|h| h.trim().to_string()).filter(|h| !h.is_empty()))
        .unwrap_or_else(|| "unknown".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_non_blank_source_wins_and_later_ones_are_not_asked() {
        let unasked: fn() -> Option<String> = || panic!("asked after an answer");
        assert_eq!(pick(&[|| Some(" box-1 \n".into()), unasked]), "box-1");
        // A blank HOSTNAME does not hide /etc/hostname.
        assert_eq!(pick(&[|| Some("  ".into()), || Some("from-file\n".into()), unasked]), "from-file");
        assert_eq!(pick(&[|| None, || Some("\n".into()), || Some("kernel".into())]), "kernel");
        assert_eq!(pick(&[|| None, || None, || None]), "unknown");
    }

    #[test]
    fn the_kernel_always_knows_a_name() {
        assert!(from_kernel().is_some_and(|h| !h.trim().is_empty()));
    }

    #[test]
    fn the_process_gets_one_non_blank_name() {
        let name = host_name();
        assert!(!name.is_empty() && name == name.trim(), "{name:?}");
        assert!(std::ptr::eq(name, host_name()), "looked up once, cached");
    }
}
