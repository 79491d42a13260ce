//! API keys and ids.
//!
//! A key is `dk_` followed by 48 hex digits (192 bits from the OS's randomness): long enough
//! that guessing is hopeless, with a prefix that secret scanners and people recognise. It is
//! shown once, when created; the store keeps only its SHA-256 (a fast hash suffices for a
//! random 192-bit secret, unlike a password). A presented key is hashed, its hash looked up,
//! and the stored hash compared with it in constant time.

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// What every key starts with.
pub const KEY_PREFIX: &str = "dk_";

/// Characters of a key shown in lists: the prefix and 8 hex digits.
pub const SHOWN_PREFIX_LEN: usize = KEY_PREFIX.len() + 8;

/// `bytes` random bytes as hex, from the OS.
fn random_hex(bytes: usize) -> String {
    let mut buffer = vec![0u8; bytes];
    getrandom::fill(&mut buffer).expect("the OS random number generator failed");
    hex::encode(buffer)
}

/// A new API key.
pub fn new_key() -> String {
    format!("{KEY_PREFIX}{}", random_hex(24))
}

/// A new tenant id (`tn_` and 16 hex digits).
pub fn new_tenant_id() -> String {
    format!("tn_{}", random_hex(8))
}

/// A new key id (`key_` and 12 hex digits).
pub fn new_key_id() -> String {
    format!("key_{}", random_hex(6))
}

/// The SHA-256 of a key, as stored.
pub fn hash(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

/// Whether two hashes are equal, in time independent of where they differ.
pub fn hashes_equal(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.ct_eq(b).into()
}

/// The part of a key shown in lists and logs.
pub fn shown_prefix(key: &str) -> String {
    key.chars().take(SHOWN_PREFIX_LEN).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_long_random_and_recognisable() {
        let (a, b) = (new_key(), new_key());
        assert!(a.starts_with("dk_") && a.len() == 51, "{a}");
        assert_ne!(a, b);
        assert_eq!(shown_prefix(&a).len(), 11);
        assert!(hashes_equal(&hash(&a), &hash(&a)));
        assert!(!hashes_equal(&hash(&a), &hash(&b)));
    }
}
