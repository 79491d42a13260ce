//! Token ids of long pieces of prompt text, kept across prompts.
//!
//! Tokenizing is the slow part of preparing a prompt over a long input: 0.3-0.4 µs per byte,
//! so 30-40 ms for a 100 KB input, paid again for every question and every repeated request
//! although the KV prefix cache makes the model's part of a repeat cheap. The tokenizer
//! ([`GgufTokenizer::encode_parts`](crate::tokenizer::GgufTokenizer::encode_parts)) splits long
//! runs of text into pieces whose ids do not depend on the text around them, and looks each
//! piece up here.
//!
//! - **Exact.** An entry is found by a hash of its text but returned only when the stored text
//!   equals the asked text byte for byte, so a hash collision costs a miss, never wrong ids.
//! - **Salted.** A hit is faster than a miss, so it tells the caller that someone asked about
//!   this text before. The key includes a salt chosen by the caller (the server passes its
//!   per-tenant salt, the one its prefix cache uses), and entries of different salts are
//!   never shared.
//! - **Bounded.** Entries count their text bytes, 4 bytes per id and a fixed overhead against a
//!   budget; the least recently used are evicted first. An entry larger than the budget is not
//!   stored. A budget of 0 turns the cache off.
//! - **Shared by threads.** Prompts are prepared on many threads at once. One mutex guards the
//!   map and is held only to look up or insert, never while tokenizing: two threads that miss
//!   the same text at the same time both tokenize it, and the second insert replaces the first
//!   with equal ids.

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Budget of a new cache: 256 MiB holds the ids of about 200 MiB of distinct input text.
pub const DEFAULT_BUDGET_BYTES: usize = 256 << 20;

/// Bytes charged per entry on top of its text and ids: the map and recency-index nodes, the
/// `Box<str>` and `Arc<[u32]>` headers.
const ENTRY_OVERHEAD: usize = 128;

/// What the cache has done and holds, for `/metrics`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TokenCacheStats {
    /// Lookups that found the text.
    pub hits: u64,
    /// Lookups that did not (the text was tokenized).
    pub misses: u64,
    /// Entries held.
    pub entries: usize,
    /// Bytes charged against the budget.
    pub bytes: usize,
}

/// A thread-safe LRU map from (salt, text) to the text's token ids, within a memory budget.
pub struct TokenCache {
    lru: Mutex<Lru>,
    hits: AtomicU64,
    misses: AtomicU64,
}

/// `(salt, hash of the text)`.
type Key = (u64, u64);

struct Entry {
    /// The text, compared in full on every hit.
    text: Box<str>,
    ids: Arc<[u32]>,
    /// Logical time of the last hit or insert; the entry's key in [`Lru::order`].
    used: u64,
}

impl Entry {
    fn bytes(&self) -> usize {
        entry_bytes(&self.text, &self.ids)
    }
}

fn entry_bytes(text: &str, ids: &[u32]) -> usize {
    text.len() + 4 * ids.len() + ENTRY_OVERHEAD
}

struct Lru {
    budget: usize,
    bytes: usize,
    clock: u64,
    map: HashMap<Key, Entry>,
    /// Keys by last use, oldest first.
    order: BTreeMap<u64, Key>,
}

impl Lru {
    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    fn remove(&mut self, key: &Key) {
        if let Some(old) = self.map.remove(key) {
            self.order.remove(&old.used);
            self.bytes -= old.bytes();
        }
    }

    /// Evicts least recently used entries until `extra` more bytes fit in the budget.
    fn make_room(&mut self, extra: usize) {
        while self.bytes + extra > self.budget {
            let Some((_, key)) = self.order.pop_first() else {
                break;
            };
            if let Some(old) = self.map.remove(&key) {
                self.bytes -= old.bytes();
            }
        }
    }
}

impl TokenCache {
    /// An empty cache that holds at most `budget` bytes (0: off).
    pub fn new(budget: usize) -> Self {
        TokenCache {
            lru: Mutex::new(Lru {
                budget,
                bytes: 0,
                clock: 0,
                map: HashMap::new(),
                order: BTreeMap::new(),
            }),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Lru> {
        // The map is consistent between statements that can panic, so a poisoned lock is usable.
        self.lru
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Changes the budget, evicting entries down to it (0 empties the cache and turns it off).
    pub fn set_budget(&self, budget: usize) {
        let mut lru = self.lock();
        lru.budget = budget;
        lru.make_room(0);
    }

    /// Whether entries can be stored at all (the budget is not 0).
    pub fn enabled(&self) -> bool {
        self.lock().budget > 0
    }

    /// The ids of `text` under `salt`: the stored ones on a hit, else `encode(text)` (run
    /// without the lock held), stored for next time when it fits the budget. (The tokenizer
    /// looks pieces up with [`TokenCache::get`] and [`TokenCache::insert`], to tokenize the
    /// missing ones together.)
    #[cfg(test)]
    pub fn get_or_encode<E>(
        &self,
        salt: u64,
        text: &str,
        encode: impl FnOnce(&str) -> Result<Vec<u32>, E>,
    ) -> Result<Arc<[u32]>, E> {
        if let Some(ids) = self.get(salt, text) {
            return Ok(ids);
        }
        let ids: Arc<[u32]> = encode(text)?.into();
        self.insert(salt, text, ids.clone());
        Ok(ids)
    }

    /// The stored ids of `text` under `salt`, counted as a hit; `None` is counted as a miss,
    /// and the caller is expected to tokenize the text and [`TokenCache::insert`] it.
    pub fn get(&self, salt: u64, text: &str) -> Option<Arc<[u32]>> {
        let key = (salt, hash_text(text));
        let mut lru = self.lock();
        let now = lru.tick();
        if let Some(entry) = lru.map.get_mut(&key) {
            if &*entry.text == text {
                let before = std::mem::replace(&mut entry.used, now);
                let ids = entry.ids.clone();
                lru.order.remove(&before);
                lru.order.insert(now, key);
                drop(lru);
                self.hits.fetch_add(1, Ordering::Relaxed);
                return Some(ids);
            }
        }
        drop(lru);
        self.misses.fetch_add(1, Ordering::Relaxed);
        None
    }

    /// Stores the ids of `text` under `salt` when they fit the budget, evicting the least
    /// recently used entries to make room.
    pub fn insert(&self, salt: u64, text: &str, ids: Arc<[u32]>) {
        let key = (salt, hash_text(text));
        let bytes = entry_bytes(text, &ids);
        let mut lru = self.lock();
        if bytes <= lru.budget {
            // Replaces an entry of equal text stored meanwhile, or one whose hash collides.
            lru.remove(&key);
            lru.make_room(bytes);
            let used = lru.tick();
            lru.order.insert(used, key);
            lru.map.insert(
                key,
                Entry {
                    text: text.into(),
                    ids,
                    used,
                },
            );
            lru.bytes += bytes;
        }
    }

    /// Hits, misses, entries and bytes held.
    pub fn stats(&self) -> TokenCacheStats {
        let lru = self.lock();
        TokenCacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            entries: lru.map.len(),
            bytes: lru.bytes,
        }
    }
}

/// A small map from (salt, key) to a shared value, for what every prompt of a model repeats
/// and is cheap to keep but not to compute: the control tokens of a chat template's pieces,
/// the label ids at a prompt's end. Salted like [`TokenCache`] (an entry serves only calls of
/// its salt), bounded by its entry count (emptied when full: the entries it is for are few),
/// and shared by threads (the lock is held only to look up or insert, never while computing).
pub(crate) struct Memo<K, V: ?Sized> {
    inner: Mutex<MemoMap<K, V>>,
}

struct MemoMap<K, V: ?Sized> {
    /// Entries over all salts.
    len: usize,
    by_salt: HashMap<u64, HashMap<K, Arc<V>>>,
}

/// Entries a [`Memo`] holds before it is emptied.
const MEMO_ENTRIES: usize = 4096;

impl<K: Eq + Hash, V: ?Sized> Memo<K, V> {
    pub fn new() -> Self {
        Memo {
            inner: Mutex::new(MemoMap {
                len: 0,
                by_salt: HashMap::new(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, MemoMap<K, V>> {
        // Consistent between statements that can panic.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The value of `key` under `salt`: the stored one, else `compute(key)` (run without the
    /// lock held), stored when it succeeds.
    pub fn get<Q, E>(
        &self,
        salt: u64,
        key: &Q,
        compute: impl FnOnce(&Q) -> Result<Arc<V>, E>,
    ) -> Result<Arc<V>, E>
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        if let Some(value) = self.lock().by_salt.get(&salt).and_then(|m| m.get(key)) {
            return Ok(value.clone());
        }
        let value = compute(key)?;
        let mut memo = self.lock();
        if memo.len >= MEMO_ENTRIES {
            memo.by_salt.clear();
            memo.len = 0;
        }
        let added = memo
            .by_salt
            .entry(salt)
            .or_default()
            .insert(key.to_owned(), value.clone())
            .is_none();
        memo.len += usize::from(added);
        Ok(value)
    }

    /// Entries held.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lock().len
    }
}

/// The hash part of a key: any good 64-bit hash will do, since hits compare the text.
fn hash_text(text: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;

    /// Fake ids: one per byte, so tests can tell texts apart by their ids.
    fn ids(text: &str) -> Result<Vec<u32>, Infallible> {
        Ok(text.bytes().map(u32::from).collect())
    }

    fn get(cache: &TokenCache, salt: u64, text: &str) -> Vec<u32> {
        cache.get_or_encode(salt, text, ids).unwrap().to_vec()
    }

    #[test]
    fn second_lookup_hits_and_returns_the_same_ids() {
        let cache = TokenCache::new(1 << 20);
        assert_eq!(get(&cache, 1, "hello"), ids("hello").unwrap());
        let again = cache
            .get_or_encode(1, "hello", |_| -> Result<Vec<u32>, Infallible> {
                panic!("a hit does not tokenize")
            })
            .unwrap();
        assert_eq!(again.to_vec(), ids("hello").unwrap());
        let stats = cache.stats();
        assert_eq!((stats.hits, stats.misses, stats.entries), (1, 1, 1));
        assert_eq!(stats.bytes, 5 + 4 * 5 + ENTRY_OVERHEAD);
    }

    #[test]
    fn salts_do_not_share_entries() {
        let cache = TokenCache::new(1 << 20);
        get(&cache, 1, "same text");
        get(&cache, 2, "same text");
        let stats = cache.stats();
        assert_eq!((stats.hits, stats.misses, stats.entries), (0, 2, 2));
        get(&cache, 2, "same text");
        assert_eq!(cache.stats().hits, 1);
    }

    #[test]
    fn a_colliding_key_with_other_text_is_a_miss() {
        let cache = TokenCache::new(1 << 20);
        get(&cache, 7, "real");
        // Plant an entry under the key of "asked" that holds other text, as a collision would.
        {
            let mut lru = cache.lock();
            let key = (7, hash_text("asked"));
            let used = lru.tick();
            lru.order.insert(used, key);
            let bytes = entry_bytes("other", &[1]);
            lru.map.insert(
                key,
                Entry {
                    text: "other".into(),
                    ids: vec![1].into(),
                    used,
                },
            );
            lru.bytes += bytes;
        }
        assert_eq!(get(&cache, 7, "asked"), ids("asked").unwrap());
        assert_eq!(cache.stats().misses, 2);
        assert_eq!(get(&cache, 7, "asked"), ids("asked").unwrap());
        assert_eq!(cache.stats().hits, 1);
    }

    #[test]
    fn evicts_least_recently_used_within_the_budget() {
        let one = entry_bytes("aaaa", &[0; 4]);
        let cache = TokenCache::new(2 * one);
        get(&cache, 0, "aaaa");
        get(&cache, 0, "bbbb");
        get(&cache, 0, "aaaa"); // hit: "bbbb" is now the oldest
        get(&cache, 0, "cccc"); // evicts "bbbb"
        let stats = cache.stats();
        assert_eq!((stats.entries, stats.bytes), (2, 2 * one));
        get(&cache, 0, "aaaa");
        assert_eq!(cache.stats().hits, 2);
        get(&cache, 0, "bbbb");
        assert_eq!(cache.stats().misses, 4);
    }

    #[test]
    fn zero_budget_stores_nothing_and_too_large_entries_are_skipped() {
        let cache = TokenCache::new(0);
        assert!(!cache.enabled());
        get(&cache, 0, "text");
        get(&cache, 0, "text");
        assert_eq!(cache.stats().entries, 0);

        let cache = TokenCache::new(entry_bytes("ab", &[0; 2]));
        get(&cache, 0, "ab");
        get(&cache, 0, "abc");
        assert_eq!(cache.stats().entries, 1);
        cache.set_budget(0);
        assert_eq!((cache.stats().entries, cache.stats().bytes), (0, 0));
    }

    #[test]
    fn threads_share_one_cache() {
        let cache = TokenCache::new(1 << 20);
        let texts: Vec<String> = (0..16).map(|i| format!("text {i}")).collect();
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for t in &texts {
                        assert_eq!(get(&cache, 3, t), ids(t).unwrap());
                    }
                });
            }
        });
        let stats = cache.stats();
        assert_eq!(stats.hits + stats.misses, 64);
        assert_eq!(stats.entries, 16);
    }
}
