//! Typed identifiers. Every id that crosses the bus is a newtype so a job id can
//! never be passed where a task id is expected, and so subjects are built from
//! validated tokens only (see [`crate::subjects`]).

use std::fmt;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

macro_rules! uuid_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub Uuid);

        impl $name {
            /// A new time-ordered (UUIDv7) id.
            pub fn new() -> Self {
                Self(Uuid::now_v7())
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }

        impl std::str::FromStr for $name {
            type Err = uuid::Error;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Uuid::parse_str(s).map(Self)
            }
        }
    };
}

uuid_id!(
    /// A job: one submission, owned by one planner run.
    JobId
);
uuid_id!(
    /// A task: one delegation of the planner to one subagent.
    TaskId
);

/// Why a name was refused as a subject token.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid {what} {value:?}: use 1-64 characters from a-z, A-Z, 0-9, '-' and '_'")]
pub struct InvalidName {
    /// Which kind of name was refused.
    pub what: &'static str,
    /// The refused value.
    pub value: String,
}

/// True when `s` can be one NATS subject token and a JetStream consumer name.
pub fn is_valid_token(s: &str) -> bool {
    !s.is_empty() && s.len() <= 64 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

macro_rules! name_id {
    ($(#[$doc:meta])* $name:ident, $what:literal) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// Validates `s` as a subject token.
            pub fn new(s: impl Into<String>) -> Result<Self, InvalidName> {
                let s = s.into();
                if is_valid_token(&s) {
                    Ok(Self(s))
                } else {
                    Err(InvalidName { what: $what, value: s })
                }
            }

            /// The name as a string slice.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                Self::new(s).map_err(serde::de::Error::custom)
            }
        }

        impl std::str::FromStr for $name {
            type Err = InvalidName;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::new(s)
            }
        }
    };
}

name_id!(
    /// A subagent type, e.g. `finance`: selects the work queue and the worker config.
    SubagentType,
    "subagent type"
);
name_id!(
    /// A tenant: the owner of a job.
    Tenant,
    "tenant"
);

impl Default for Tenant {
    fn default() -> Self {
        Self("default".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_refuse_subject_metacharacters() {
        for bad in ["", "a.b", "a*", ">", "a b", &"x".repeat(65)] {
            assert!(SubagentType::new(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(SubagentType::new("finance-2_b").unwrap().as_str(), "finance-2_b");
        let err: Result<SubagentType, _> = serde_json::from_str("\"a.b\"");
        assert!(err.unwrap_err().to_string().contains("invalid subagent type"));
    }

    #[test]
    fn ids_are_time_ordered() {
        let a = TaskId::new();
        let b = TaskId::new();
        assert!(a < b);
        assert_eq!(a.to_string().parse::<TaskId>().unwrap(), a);
    }
}
