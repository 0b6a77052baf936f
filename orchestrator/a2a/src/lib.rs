//! A2A v1.0 (docs/PROTOCOLS.md).
