//! The Synadia Agent Protocol for NATS (docs/PROTOCOLS.md).
