//! The cross-request prefix cache: KV caches of prompt prefixes, keyed by hashed token blocks.
//!
//! Requests about the same input share their prompt's beginning (chat-template header, the
//! input itself). When one request has prefilled such a prefix, the next request that starts
//! with the same tokens continues from the stored KV and skips those tokens entirely.
//!
//! - **Blocks.** Prefixes are stored at multiples of [`BLOCK_TOKENS`]; the key of a prefix is
//!   a hash chained over its blocks, so looking up a prompt costs one hash per block and one
//!   map probe per block boundary, longest first.
//! - **Tenants.** The chain starts from a per-tenant salt, so one tenant's prompts never
//!   match another tenant's entries, even for identical text. A hit is also checked token by
//!   token, so a hash collision can never serve another prompt's KV.
//! - **Budget.** Entries are evicted least-recently-used first when the KV bytes held would
//!   exceed the budget (`--prefix-cache-mib`). An entry larger than the whole budget is not
//!   stored.
//!
//! Entries are mostly independent copies ([`KvCache::prefix`]): two stored prefixes of one
//! prompt hold their common part twice, except for whole pieces of a cache both were cut from
//! (a long prefill's chunks on the GPU), which they share. Each entry's budget counts all it
//! holds, shared or not, so the memory held never exceeds the budget. That trades memory for
//! simplicity; paged sharing of blocks between entries is a later refinement.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use decide_models::KvCache;

use crate::recent_starts::RecentStarts;

/// Tokens per block: prefixes are stored and matched at multiples of this.
///
/// 16, as vLLM's blocks: the common beginning of short prompts (a chat-template header of
/// ~50 tokens) is stored to within 15 tokens ([`crate::recent_starts`]).
pub const BLOCK_TOKENS: usize = 16;

/// What the cache stores per prefix: the KV of that many positions, of a known size. Generic
/// so that the LRU and budget rules can be tested without a model.
pub trait CachedPrefix: Clone {
    /// Positions held.
    fn positions(&self) -> usize;
    /// Memory held, in bytes.
    fn bytes(&self) -> usize;
    /// The first `len` positions, to store (`KvCache::prefix`); `None` when that failed.
    fn first(&self, len: usize) -> Option<Self>;
}

impl CachedPrefix for KvCache {
    fn positions(&self) -> usize {
        self.len()
    }
    fn bytes(&self) -> usize {
        self.size_bytes()
    }
    fn first(&self, len: usize) -> Option<Self> {
        self.prefix(len)
            .inspect_err(|e| tracing::warn!("a prefix was not stored: {e}"))
            .ok()
    }
}

/// A prefix [`PrefixCache::insert_later`] took, stored by the next [`PrefixCache::flush`]:
/// the first `tokens.len()` positions of `cache`.
struct Pending<C> {
    salt: u64,
    tokens: Vec<u32>,
    cache: C,
}

/// A stored prefix.
struct Entry<C> {
    /// The prefix's tokens, checked on every hit.
    tokens: Vec<u32>,
    cache: C,
    bytes: usize,
    /// Logical time of the last hit or insert (for LRU eviction).
    used: u64,
}

/// What the cache has done, for `/metrics`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CacheStats {
    pub hits: u64,
    pub misses: u64,
    /// Prompt tokens served from the cache.
    pub hit_tokens: u64,
    pub inserts: u64,
    pub evictions: u64,
    pub entries: usize,
    pub bytes: usize,
}

/// KV caches of prompt prefixes within a memory budget. Not shared between threads: the
/// model worker owns it (see [`crate::scheduler`]).
pub struct PrefixCache<C = KvCache> {
    budget_bytes: usize,
    entries: HashMap<u64, Entry<C>>,
    clock: u64,
    stats: CacheStats,
    recent: RecentStarts,
    pending: Vec<Pending<C>>,
}

impl<C: CachedPrefix> PrefixCache<C> {
    /// An empty cache holding at most `budget_bytes` of KV (0 disables it).
    pub fn new(budget_bytes: usize) -> Self {
        PrefixCache {
            budget_bytes,
            entries: HashMap::new(),
            clock: 0,
            stats: CacheStats::default(),
            recent: RecentStarts::default(),
            pending: Vec::new(),
        }
    }

    pub fn stats(&self) -> CacheStats {
        CacheStats {
            entries: self.entries.len(),
            ..self.stats
        }
    }

    /// The longest stored prefix of `tokens` for this tenant: its KV cache (holding
    /// `positions()`, a multiple of [`BLOCK_TOKENS`]), or `None`.
    pub fn lookup(&mut self, salt: u64, tokens: &[u32]) -> Option<C> {
        if self.budget_bytes == 0 {
            return None;
        }
        self.flush();
        let keys = block_keys(salt, tokens);
        self.clock += 1;
        for (blocks, key) in keys.iter().enumerate().rev() {
            let len = (blocks + 1) * BLOCK_TOKENS;
            if let Some(entry) = self.entries.get_mut(key) {
                if entry.tokens == tokens[..len] {
                    entry.used = self.clock;
                    self.stats.hits += 1;
                    self.stats.hit_tokens += len as u64;
                    return Some(entry.cache.clone());
                }
            }
        }
        self.stats.misses += 1;
        None
    }

    /// How many leading tokens a short prompt shares with the previous short prompt of the
    /// same salt (0 with the cache off): what is worth storing once ([`RecentStarts`]).
    pub fn common_start(&mut self, salt: u64, tokens: &[u32]) -> usize {
        if self.budget_bytes == 0 {
            return 0;
        }
        self.recent.common_start(salt, tokens)
    }

    /// Stores the first `tokens.len()` positions of `cache` (at most all it holds) at the
    /// next [`PrefixCache::flush`] or lookup, whichever comes first; [`PrefixCache::insert`]
    /// says which prefixes are kept.
    ///
    /// Why later: cutting the prefix and evicting to make room are host work (on a GPU, a
    /// copy and its launches, and a free per evicted tensor; a few ms for a 28k-token
    /// input's entry). After a lone prompt's read the worker answers first and stores
    /// after, while the reply goes out; a later lookup still finds the entry.
    pub fn insert_later(&mut self, salt: u64, tokens: &[u32], cache: C) {
        if self.budget_bytes == 0 || tokens.len() > cache.positions() {
            return;
        }
        self.pending.push(Pending {
            salt,
            tokens: tokens.to_vec(),
            cache,
        });
    }

    /// Stores what [`PrefixCache::insert_later`] took; whether there was any.
    pub fn flush(&mut self) -> bool {
        if self.pending.is_empty() {
            return false;
        }
        for p in std::mem::take(&mut self.pending) {
            let cut = if p.cache.positions() == p.tokens.len() {
                Some(p.cache)
            } else {
                p.cache.first(p.tokens.len())
            };
            if let Some(cut) = cut {
                self.insert(p.salt, &p.tokens, cut);
            }
        }
        true
    }

    /// Stores the KV of `tokens` (whose length must be a multiple of [`BLOCK_TOKENS`] and
    /// equal `cache.len()`), evicting least-recently-used entries to stay within the budget.
    pub fn insert(&mut self, salt: u64, tokens: &[u32], cache: C) {
        let bytes = cache.bytes();
        if self.budget_bytes == 0
            || tokens.is_empty()
            || !tokens.len().is_multiple_of(BLOCK_TOKENS)
            || cache.positions() != tokens.len()
            || bytes > self.budget_bytes
        {
            return;
        }
        let key = *block_keys(salt, tokens).last().expect("at least one block");
        self.clock += 1;
        if let Some(old) = self.entries.remove(&key) {
            self.stats.bytes -= old.bytes;
        }
        while self.stats.bytes + bytes > self.budget_bytes {
            let Some((&oldest, _)) = self.entries.iter().min_by_key(|(_, e)| e.used) else {
                break;
            };
            let evicted = self.entries.remove(&oldest).expect("present");
            self.stats.bytes -= evicted.bytes;
            self.stats.evictions += 1;
        }
        self.entries.insert(
            key,
            Entry {
                tokens: tokens.to_vec(),
                cache,
                bytes,
                used: self.clock,
            },
        );
        self.stats.bytes += bytes;
        self.stats.inserts += 1;
    }
}

/// The chained hash of each full block of `tokens`: key `i` covers blocks `0..=i`.
fn block_keys(salt: u64, tokens: &[u32]) -> Vec<u64> {
    let mut chain = salt;
    tokens
        .chunks_exact(BLOCK_TOKENS)
        .map(|block| {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            chain.hash(&mut h);
            block.hash(&mut h);
            chain = h.finish();
            chain
        })
        .collect()
}

/// The salt of a tenant: a hash of whatever identifies it (its credentials, its
/// `prompt_cache_key`). Requests with different salts never share cache entries.
pub fn tenant_salt(parts: &[&str]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    "decide-prefix-cache/1".hash(&mut h);
    for part in parts {
        part.hash(&mut h);
    }
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_chain_over_blocks_and_depend_on_the_salt() {
        let tokens: Vec<u32> = (0..(6 * BLOCK_TOKENS + 4) as u32).collect();
        let a = block_keys(1, &tokens);
        assert_eq!(a.len(), 6, "only full blocks are keyed");
        assert_eq!(block_keys(1, &tokens[..4 * BLOCK_TOKENS]), a[..4]);
        assert_ne!(block_keys(2, &tokens), a, "another tenant, other keys");
        let mut other = tokens.clone();
        other[0] = 999;
        let b = block_keys(1, &other);
        assert!(
            a.iter().zip(&b).all(|(x, y)| x != y),
            "a change in block 0 changes every key"
        );
    }

    /// A stand-in for a KV cache: positions and a size.
    #[derive(Clone, Debug, PartialEq)]
    struct Kv(usize, usize);

    impl CachedPrefix for Kv {
        fn positions(&self) -> usize {
            self.0
        }
        fn bytes(&self) -> usize {
            self.1
        }
        fn first(&self, len: usize) -> Option<Self> {
            Some(Kv(len, self.1 * len / self.0))
        }
    }

    #[test]
    fn a_prefix_stored_later_is_found_by_the_next_lookup_or_after_a_flush() {
        let prompt: Vec<u32> = (0..100).collect();
        let mut cache = PrefixCache::new(1000);
        cache.insert_later(7, &prompt[..96], Kv(100, 50));
        assert_eq!(cache.stats().entries, 0, "nothing stored yet");
        assert_eq!(
            cache.lookup(7, &prompt),
            Some(Kv(96, 48)),
            "cut to its tokens"
        );
        assert_eq!(cache.stats().inserts, 1);

        cache.insert_later(8, &prompt[..64], Kv(64, 10));
        assert!(cache.flush());
        assert_eq!(cache.stats().entries, 2);
        assert!(!cache.flush(), "nothing left to store");
        assert_eq!(cache.stats().inserts, 2, "a flush stores each once");
        assert_eq!(cache.lookup(8, &prompt), Some(Kv(64, 10)));

        let mut off = PrefixCache::new(0);
        off.insert_later(7, &prompt[..96], Kv(100, 50));
        off.flush();
        assert_eq!(off.stats().inserts, 0, "budget 0 stores nothing");
    }

    #[test]
    fn longest_stored_prefix_wins_and_tenants_are_isolated() {
        let prompt: Vec<u32> = (0..200).collect();
        let mut cache = PrefixCache::new(1000);
        assert_eq!(cache.lookup(7, &prompt), None);
        cache.insert(7, &prompt[..64], Kv(64, 10));
        cache.insert(7, &prompt[..128], Kv(128, 20));
        assert_eq!(cache.lookup(7, &prompt), Some(Kv(128, 20)));
        assert_eq!(cache.lookup(7, &prompt[..100]), Some(Kv(64, 10)));
        assert_eq!(cache.lookup(8, &prompt), None, "another tenant never hits");
        let mut diverging = prompt.clone();
        diverging[70] = 0;
        assert_eq!(cache.lookup(7, &diverging), Some(Kv(64, 10)));
        let s = cache.stats();
        assert_eq!((s.hits, s.misses, s.hit_tokens), (3, 2, 128 + 64 + 64));
        assert_eq!((s.entries, s.bytes), (2, 30));
    }

    #[test]
    fn least_recently_used_entries_go_first_within_the_budget() {
        let a: Vec<u32> = (0..32).collect();
        let b: Vec<u32> = (100..132).collect();
        let c: Vec<u32> = (200..232).collect();
        let mut cache = PrefixCache::new(25);
        cache.insert(1, &a, Kv(32, 10));
        cache.insert(1, &b, Kv(32, 10));
        assert!(cache.lookup(1, &a).is_some(), "a is now more recent than b");
        cache.insert(1, &c, Kv(32, 10));
        assert!(cache.lookup(1, &b).is_none(), "b was evicted");
        assert!(cache.lookup(1, &a).is_some() && cache.lookup(1, &c).is_some());
        assert_eq!(cache.stats().evictions, 1);
        assert_eq!(cache.stats().bytes, 20);
        cache.insert(1, &b, Kv(32, 26));
        assert!(
            cache.lookup(1, &b).is_none(),
            "larger than the whole budget: not stored"
        );
        cache.insert(1, &a[..31], Kv(31, 1));
        assert_eq!(cache.stats().inserts, 3, "partial blocks are not stored");
        let mut off = PrefixCache::new(0);
        off.insert(1, &a, Kv(32, 0));
        assert!(off.lookup(1, &a).is_none(), "budget 0 disables the cache");
    }

    #[test]
    fn tenant_salts_differ_by_every_part() {
        assert_ne!(tenant_salt(&["key-a", ""]), tenant_salt(&["key-b", ""]));
        assert_ne!(tenant_salt(&["key-a", "x"]), tenant_salt(&["key-a", "y"]));
        assert_ne!(tenant_salt(&["ab", "c"]), tenant_salt(&["a", "bc"]));
        assert_eq!(tenant_salt(&["key-a", "x"]), tenant_salt(&["key-a", "x"]));
    }
}
