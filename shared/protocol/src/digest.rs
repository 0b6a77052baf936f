//! The one SHA-256 hex encoder: file checksums, argument digests, keys.
//! It lives with the wire contract because the contract names its output
//! (a [`FileRef`](crate::FileRef)'s `sha256`, hashed key tokens): pure
//! computation, no I/O.

use sha2::{Digest, Sha256};

/// Lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// A [`FileRef`](crate::FileRef) describing `text` stored at `path`.
pub fn describe_file(path: impl Into<String>, text: &str) -> crate::FileRef {
    crate::FileRef::describe(path, text, sha256_hex(text.as_bytes()))
}

#[cfg(test)]
mod tests {
    #[test]
    fn known_vector() {
        assert_eq!(super::sha256_hex(b"abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }
}
