//! `<prefix>.api.<tenant>.resolve`: the tenant's jobs whose id starts or
//! ends with a short id, so a person may type what the CLI and the dashboard
//! display (an id's last 8 characters, `flotilla status 6a57e4c1`) or a
//! git-style prefix (`0195f3a2`) instead of the whole UUID (docs/PROTOCOL.md
//! "Job API"). Both ends are accepted because UUIDv7 prefixes are the
//! creation time: jobs created within a minute share their first 8
//! characters, while their last 8 are random. The
//! orchestrator answers from the job index of that tenant only, so a client
//! whose NATS permissions confine it to its tenant resolves its own jobs and
//! never learns another tenant's ids.

use serde::{Deserialize, Serialize};

use super::Message;
use crate::ids::JobId;

/// Shortest accepted prefix: 4 characters (16 bits; UUIDv7 ids begin with
/// their creation time, so a short prefix matches every job of a period).
pub const MIN_JOB_PREFIX: usize = 4;

/// Most candidates one `resolve` reply lists (the newest ones).
pub const MAX_RESOLVE_CANDIDATES: usize = 20;

/// `<prefix>.api.<tenant>.resolve`: the jobs whose id starts with `prefix`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResolveRequest {
    /// Schema version.
    #[serde(default = "super::schema_version")]
    pub v: u32,
    /// The start or the end of a job id (lowercase hex and `-`), at least
    /// [`MIN_JOB_PREFIX`] characters; see [`check_job_prefix`] and
    /// [`matches_short_id`]. The field keeps its name for compatibility.
    pub prefix: String,
}

/// Reply to `resolve`: the matching jobs, newest first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ResolveReply {
    /// At most [`MAX_RESOLVE_CANDIDATES`] matching job ids, newest first.
    pub jobs: Vec<JobId>,
    /// How many jobs match in all (more than `jobs` holds when it was cut).
    pub matches: usize,
}

impl Message for ResolveRequest {
    const NAME: &'static str = "resolve request";
}

/// `text` as a job id prefix (lowercased), or why it cannot be one: a
/// message naming the rule, not a UUID parser's "invalid length".
pub fn check_job_prefix(text: &str) -> Result<String, String> {
    let prefix = text.trim().to_ascii_lowercase();
    if prefix.len() < MIN_JOB_PREFIX {
        return Err(format!(
            "{text:?} is too short for a job id: give the whole id or a unique prefix of at least {MIN_JOB_PREFIX} characters"
        ));
    }
    if prefix.len() > 36 || !prefix.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
        return Err(format!(
            "{text:?} is not a job id: job ids are UUIDs such as 0195f3a2-7c1e-7b3d-9a4f-2c8e1d0b6a57 (a prefix of at least {MIN_JOB_PREFIX} characters is enough)"
        ));
    }
    Ok(prefix)
}

/// Whether `id` (as printed) starts or ends with `short`, a text that passed
/// [`check_job_prefix`]: a job or task named by its displayed short id (the
/// last 8 characters) or by a prefix.
pub fn matches_short_id(id: &str, short: &str) -> bool {
    id.starts_with(short) || id.ends_with(short)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_are_hex_and_dashes_of_at_least_four_characters() {
        assert_eq!(check_job_prefix("0195F3A2").unwrap(), "0195f3a2");
        assert_eq!(check_job_prefix("0195f3a2-7c").unwrap(), "0195f3a2-7c");
        let short = check_job_prefix("abc").unwrap_err();
        assert!(short.contains("at least 4 characters") && !short.contains("invalid length"), "{short}");
        assert!(check_job_prefix("xyz1").unwrap_err().contains("not a job id"));
        assert!(check_job_prefix(&"a".repeat(37)).is_err());
    }

    #[test]
    fn a_short_id_is_either_end_of_an_id() {
        let id = "0195f3a2-7c1e-7b3d-9a4f-2c8e1d0b6a57";
        assert!(matches_short_id(id, "0195f3a2"));
        assert!(matches_short_id(id, "1d0b6a57"), "the displayed last 8 characters");
        assert!(!matches_short_id(id, "7c1e-7b3d"), "the middle is neither end");
    }

    #[test]
    fn requests_refuse_unknown_fields_and_replies_round_trip() {
        let req: ResolveRequest = crate::decode(br#"{"v":1,"prefix":"0195"}"#).unwrap();
        assert_eq!(req.prefix, "0195");
        assert!(crate::decode::<ResolveRequest>(br#"{"v":1,"prefix":"0195","limit":3}"#).is_err());
        let reply = ResolveReply { jobs: vec![JobId::new()], matches: 1 };
        let back: ResolveReply = serde_json::from_str(&serde_json::to_string(&reply).unwrap()).unwrap();
        assert_eq!(back, reply);
    }
}
