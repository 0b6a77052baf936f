//! A job as a person names it on the command line: its whole id, the short
//! id the CLI and dashboard display (its last 8 characters), or a unique
//! prefix of at least four characters, git-style (`flotilla status
//! 0195f3a2`). Short ids are resolved by the orchestrator's `resolve`
//! operation over this tenant's jobs ([`crate::Client::resolve`];
//! docs/PROTOCOL.md, "Job API"), so a client confined to its tenant's API
//! subjects can use them. Text that can be neither (`abc`, `xyz1`) is refused
//! while the command line is parsed, with the rule, not a UUID parser's
//! "invalid length".

use std::str::FromStr;

use flotilla_protocol::ids::JobId;

/// A whole job id, or the start of one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobRef {
    /// A whole id: used as given, no lookup.
    Id(JobId),
    /// The start or the end of an id, lowercased (hex digits and `-`).
    Prefix(String),
}

impl FromStr for JobRef {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().parse::<uuid::Uuid>() {
            Ok(id) => Ok(JobRef::Id(JobId(id))),
            Err(_) => flotilla_protocol::check_job_prefix(s).map(JobRef::Prefix),
        }
    }
}

impl std::fmt::Display for JobRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JobRef::Id(id) => write!(f, "{id}"),
            JobRef::Prefix(p) => f.write_str(p),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_ids_and_prefixes_parse_and_nonsense_says_why() {
        let id = JobId::new();
        assert_eq!(id.to_string().parse::<JobRef>(), Ok(JobRef::Id(id)));
        let short: String = id.to_string().chars().take(8).collect();
        assert_eq!(short.to_uppercase().parse::<JobRef>(), Ok(JobRef::Prefix(short)));
        let e = "abc".parse::<JobRef>().unwrap_err();
        assert!(e.contains("at least 4 characters") && !e.contains("invalid length"), "{e}");
        assert!("not-a-job".parse::<JobRef>().unwrap_err().contains("not a job id"));
    }
}
