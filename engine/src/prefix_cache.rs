//! The cross-request prefix cache: the KV of every full block of tokens a tenant's prompts
//! were read with, kept once, so that any later prompt of that tenant that starts alike reads
//! only what is new.
//!
//! - **Blocks.** Prompts are cut into blocks of [`BLOCK_TOKENS`]; block `i`'s key is a hash
//!   chained over blocks `0..=i` from the tenant's salt, so a key names a block's content and
//!   its position and everything before it. Looking up a prompt costs one hash and one map
//!   probe per block, and a hit is checked token by token (a hash collision can never serve
//!   another prompt's KV).
//! - **A tree of runs, each block once.** Stored blocks form a radix tree (as SGLang's): a
//!   node holds the KV of a run of consecutive blocks continuing its parent's. Prompts that
//!   share blocks share the nodes that hold them: the chat-template header, a system message,
//!   an input asked about again, a question's options repeated over other inputs. When a new
//!   prompt leaves a run in its middle, the run is split in two there. A lookup chains the
//!   KV of the nodes on the prompt's path ([`CachedPrefix::chain`]).
//! - **Tenants.** The chain starts from a per-tenant salt ([`tenant_salt`]): one tenant's
//!   prompts never match another tenant's blocks, even for identical text.
//! - **Budget.** Nodes are evicted least-recently-used first, leaves only (a node's KV is what
//!   its children continue), when the KV bytes held would exceed the budget
//!   (`--prefix-cache-mib`). A run larger than the whole budget is not stored.
//! - **Counters.** Lookups that found something and that did not, and per block: the full
//!   blocks of looked-up prompts that were found and that were not ([`CacheStats`]).
//!
//! Reads do not depend on what was cached: on CPU a read over cached KV is bit for bit the
//! read of its prompt alone (the models crate's split-invariant numerics), on the GPU within
//! bf16 rounding.

use std::collections::{BTreeSet, HashMap};
use std::hash::{Hash, Hasher};

use decide_models::KvCache;

use crate::recent_starts::RecentStarts;

/// Tokens per block: prefixes are stored and matched at multiples of this.
///
/// 16, as vLLM's blocks: the common beginning of short prompts (a chat-template header of
/// ~50 tokens) is stored to within 15 tokens ([`crate::recent_starts`]).
pub const BLOCK_TOKENS: usize = 16;

/// What the cache stores: the KV of a run of positions, of a known size. Generic so that the
/// tree, LRU and budget rules can be tested without a model.
pub trait CachedPrefix: Clone {
    /// Positions held.
    fn positions(&self) -> usize;
    /// Memory held, in bytes.
    fn bytes(&self) -> usize;
    /// Positions `from..to` (`KvCache::range`); `None` when that failed.
    fn range(&self, from: usize, to: usize) -> Option<Self>;
    /// `parts` one after another (`KvCache::chain`); `None` when that failed.
    fn chain(parts: &[Self]) -> Option<Self>;
}

impl CachedPrefix for KvCache {
    fn positions(&self) -> usize {
        self.len()
    }
    fn bytes(&self) -> usize {
        self.size_bytes()
    }
    fn range(&self, from: usize, to: usize) -> Option<Self> {
        if from == 0 && to == self.len() {
            return Some(self.clone());
        }
        KvCache::range(self, from, to)
            .inspect_err(|e| tracing::warn!("a run of blocks was not stored: {e}"))
            .ok()
    }
    fn chain(parts: &[Self]) -> Option<Self> {
        KvCache::chain(parts)
            .inspect_err(|e| tracing::warn!("cached blocks could not be joined: {e}"))
            .ok()
            .flatten()
    }
}

/// A prompt [`PrefixCache::insert_later`] took, stored by the next [`PrefixCache::flush`].
struct Pending<C> {
    salt: u64,
    tokens: Vec<u32>,
    cache: C,
}

type NodeId = usize;

/// A run of stored blocks continuing its parent's (the root's children start at position 0).
struct Node<C> {
    parent: Option<NodeId>,
    children: Vec<NodeId>,
    /// The run's tokens (whole blocks), checked on every hit.
    tokens: Vec<u32>,
    /// The chained key of each of its blocks.
    keys: Vec<u64>,
    /// The run's KV: `tokens.len()` positions, continuing the parent's.
    kv: C,
    bytes: usize,
    /// Logical time of the last hit or insert through it (LRU).
    used: u64,
}

/// What the cache has done and holds, for `/metrics`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CacheStats {
    /// Lookups that found at least one block, and that found none.
    pub hits: u64,
    pub misses: u64,
    /// Prompt tokens served from the cache.
    pub hit_tokens: u64,
    /// Full blocks of looked-up prompts found, and not found.
    pub block_hits: u64,
    pub block_misses: u64,
    /// Runs of blocks stored, and evicted.
    pub inserts: u64,
    pub evictions: u64,
    /// Runs held, and the blocks in them.
    pub entries: usize,
    pub blocks: usize,
    pub bytes: usize,
}

/// The KV of prompts' blocks within a memory budget. Not shared between threads: the model
/// worker owns it (see [`crate::scheduler`]).
pub struct PrefixCache<C = KvCache> {
    budget_bytes: usize,
    nodes: Vec<Option<Node<C>>>,
    free: Vec<NodeId>,
    /// Block key -> the node holding that block, and the block's index in its run.
    index: HashMap<u64, (NodeId, usize)>,
    /// Nodes without children, by last use: what eviction takes from.
    leaves: BTreeSet<(u64, NodeId)>,
    clock: u64,
    stats: CacheStats,
    recent: RecentStarts,
    pending: Vec<Pending<C>>,
}

/// Where a prompt's stored blocks end: the last node matched and how many of its blocks.
#[derive(Clone, Copy)]
struct Reach {
    node: NodeId,
    blocks: usize,
    /// Blocks of the prompt matched in all.
    total: usize,
}

impl<C: CachedPrefix> PrefixCache<C> {
    /// An empty cache holding at most `budget_bytes` of KV (0 disables it).
    pub fn new(budget_bytes: usize) -> Self {
        PrefixCache {
            budget_bytes,
            nodes: Vec::new(),
            free: Vec::new(),
            index: HashMap::new(),
            leaves: BTreeSet::new(),
            clock: 0,
            stats: CacheStats::default(),
            recent: RecentStarts::default(),
            pending: Vec::new(),
        }
    }

    pub fn stats(&self) -> CacheStats {
        self.stats
    }

    fn node(&self, id: NodeId) -> &Node<C> {
        self.nodes[id].as_ref().expect("a live node")
    }

    fn node_mut(&mut self, id: NodeId) -> &mut Node<C> {
        self.nodes[id].as_mut().expect("a live node")
    }

    /// How far `keys` (of `tokens`) run through stored blocks.
    fn reach(&self, keys: &[u64], tokens: &[u32]) -> Option<Reach> {
        let mut reach: Option<Reach> = None;
        for (i, key) in keys.iter().enumerate() {
            let Some(&(id, b)) = self.index.get(key) else {
                break;
            };
            let node = self.node(id);
            let continues = match reach {
                None => b == 0 && node.parent.is_none(),
                Some(r) if r.node == id => b == r.blocks,
                Some(r) => {
                    b == 0 && node.parent == Some(r.node) && {
                        r.blocks == self.node(r.node).keys.len()
                    }
                }
            };
            let block = &tokens[i * BLOCK_TOKENS..(i + 1) * BLOCK_TOKENS];
            if !continues || node.tokens[b * BLOCK_TOKENS..(b + 1) * BLOCK_TOKENS] != *block {
                break;
            }
            reach = Some(Reach {
                node: id,
                blocks: b + 1,
                total: i + 1,
            });
        }
        reach
    }

    /// The nodes from the root to `id`, in position order.
    fn path(&self, id: NodeId) -> Vec<NodeId> {
        let mut path = vec![id];
        while let Some(parent) = self.node(*path.last().expect("non-empty")).parent {
            path.push(parent);
        }
        path.reverse();
        path
    }

    /// Marks the nodes of `path` used now.
    fn touch(&mut self, path: &[NodeId]) {
        self.clock += 1;
        for &id in path {
            let clock = self.clock;
            let node = self.node_mut(id);
            let was = node.used;
            node.used = clock;
            if node.children.is_empty() {
                self.leaves.remove(&(was, id));
                self.leaves.insert((clock, id));
            }
        }
    }

    /// The longest stored prefix of `tokens` for this tenant: its KV cache (holding
    /// `positions()`, a multiple of [`BLOCK_TOKENS`]), or `None`.
    pub fn lookup(&mut self, salt: u64, tokens: &[u32]) -> Option<C> {
        self.find(salt, tokens, true, 0)
    }

    /// [`PrefixCache::lookup`] (counted alike), returning the stored prefix only when it
    /// holds more than `than` tokens: joining a long stored prefix's runs is a copy, not
    /// worth making when the caller has as much already.
    pub fn lookup_longer(&mut self, salt: u64, tokens: &[u32], than: usize) -> Option<C> {
        self.find(salt, tokens, true, than + 1)
    }

    /// [`PrefixCache::lookup`] without counting it: for a prefix of prompts whose own
    /// lookups were counted already.
    pub fn peek(&mut self, salt: u64, tokens: &[u32]) -> Option<C> {
        self.find(salt, tokens, false, 0)
    }

    /// How many of `tokens` this tenant's stored blocks hold (a multiple of
    /// [`BLOCK_TOKENS`]), without counting, touching or building anything, and without the
    /// blocks still waiting to be stored: whether a read would store anything new.
    pub fn held(&self, salt: u64, tokens: &[u32]) -> usize {
        if self.budget_bytes == 0 {
            return 0;
        }
        let keys = block_keys(salt, tokens);
        self.reach(&keys, tokens)
            .map_or(0, |reach| reach.total * BLOCK_TOKENS)
    }

    fn find(&mut self, salt: u64, tokens: &[u32], count: bool, at_least: usize) -> Option<C> {
        if self.budget_bytes == 0 {
            return None;
        }
        self.flush();
        let keys = block_keys(salt, tokens);
        let Some(reach) = self.reach(&keys, tokens) else {
            if count {
                self.stats.misses += 1;
                self.stats.block_misses += keys.len() as u64;
            }
            return None;
        };
        if count {
            self.stats.hits += 1;
            self.stats.hit_tokens += (reach.total * BLOCK_TOKENS) as u64;
            self.stats.block_hits += reach.total as u64;
            self.stats.block_misses += (keys.len() - reach.total) as u64;
        }
        let path = self.path(reach.node);
        self.touch(&path);
        if reach.total * BLOCK_TOKENS < at_least {
            return None;
        }
        let last = self.node(reach.node);
        let mut parts: Vec<C> = path[..path.len() - 1]
            .iter()
            .map(|&id| self.node(id).kv.clone())
            .collect();
        parts.push(if reach.blocks == last.keys.len() {
            last.kv.clone()
        } else {
            last.kv.range(0, reach.blocks * BLOCK_TOKENS)?
        });
        C::chain(&parts)
    }

    /// How many leading tokens a short prompt shares with the previous short prompt of the
    /// same salt (0 with the cache off): what is worth storing once ([`RecentStarts`]).
    pub fn common_start(&mut self, salt: u64, tokens: &[u32]) -> usize {
        if self.budget_bytes == 0 {
            return 0;
        }
        self.recent.common_start(salt, tokens)
    }

    /// Stores the full blocks of `tokens` (at most all the positions `cache` holds, which
    /// are `tokens`' from position 0) at the next [`PrefixCache::flush`] or lookup,
    /// whichever comes first; [`PrefixCache::insert`] says what is kept.
    ///
    /// Why later: cutting the new blocks out and evicting to make room are host work (on a
    /// GPU, copies and their launches, and a free per evicted tensor; a few ms for a
    /// 28k-token input). After a batch's reads the worker answers first and stores after,
    /// while the replies go out; a later lookup still finds the blocks.
    pub fn insert_later(&mut self, salt: u64, tokens: &[u32], cache: C) {
        let len = tokens.len().min(cache.positions()) / BLOCK_TOKENS * BLOCK_TOKENS;
        if self.budget_bytes == 0 || len == 0 {
            return;
        }
        self.pending.push(Pending {
            salt,
            tokens: tokens[..len].to_vec(),
            cache,
        });
    }

    /// Stores what [`PrefixCache::insert_later`] took; whether there was any.
    pub fn flush(&mut self) -> bool {
        if self.pending.is_empty() {
            return false;
        }
        for p in std::mem::take(&mut self.pending) {
            self.insert(p.salt, &p.tokens, p.cache);
        }
        true
    }

    /// Stores the full blocks of `tokens` that are not stored yet, from `cache` (the KV of
    /// `tokens` from position 0, at least as many positions as the blocks stored), evicting
    /// least-recently-used runs to stay within the budget.
    pub fn insert(&mut self, salt: u64, tokens: &[u32], cache: C) {
        let len = tokens.len().min(cache.positions()) / BLOCK_TOKENS * BLOCK_TOKENS;
        if self.budget_bytes == 0 || len == 0 {
            return;
        }
        let tokens = &tokens[..len];
        let keys = block_keys(salt, tokens);
        let reach = self.reach(&keys, tokens);
        let matched = reach.map_or(0, |r| r.total);
        if matched == keys.len() {
            let path = self.path(reach.expect("all blocks matched").node);
            self.touch(&path);
            return;
        }
        // The new run continues the last matched node, split where the prompt leaves it.
        let parent = match reach {
            None => None,
            Some(r) if r.blocks == self.node(r.node).keys.len() => Some(r.node),
            Some(r) => match self.split(r.node, r.blocks) {
                Some(()) => Some(r.node),
                None => return,
            },
        };
        let from = matched * BLOCK_TOKENS;
        let Some(kv) = cache.range(from, len) else {
            return;
        };
        let bytes = kv.bytes();
        if bytes > self.budget_bytes {
            return;
        }
        self.clock += 1;
        let node = Node {
            parent,
            children: Vec::new(),
            tokens: tokens[from..].to_vec(),
            keys: keys[matched..].to_vec(),
            kv,
            bytes,
            used: self.clock,
        };
        let id = self.free.pop().unwrap_or_else(|| {
            self.nodes.push(None);
            self.nodes.len() - 1
        });
        for (b, &key) in node.keys.iter().enumerate() {
            self.index.insert(key, (id, b));
        }
        self.stats.blocks += node.keys.len();
        self.nodes[id] = Some(node);
        if let Some(parent) = parent {
            let p = self.node_mut(parent);
            let was_leaf = p.children.is_empty();
            p.children.push(id);
            let used = p.used;
            if was_leaf {
                self.leaves.remove(&(used, parent));
            }
            let path = self.path(parent);
            self.touch(&path);
        }
        self.node_mut(id).used = self.clock;
        self.leaves.insert((self.clock, id));
        self.stats.bytes += bytes;
        self.stats.inserts += 1;
        self.stats.entries += 1;
        self.evict_to_budget();
    }

    /// Splits node `id` after its first `blocks` blocks: they stay in `id`, the rest moves
    /// to a new child of `id` that takes over `id`'s children. `None` when the KV could not
    /// be cut (nothing changes then).
    fn split(&mut self, id: NodeId, blocks: usize) -> Option<()> {
        let cut = blocks * BLOCK_TOKENS;
        let node = self.node(id);
        let len = node.tokens.len();
        let head = node.kv.range(0, cut)?;
        let tail = node.kv.range(cut, len)?;
        let tail_id = self.free.pop().unwrap_or_else(|| {
            self.nodes.push(None);
            self.nodes.len() - 1
        });
        let node = self.node_mut(id);
        let (head_bytes, tail_bytes) = (head.bytes(), tail.bytes());
        let old_bytes = std::mem::replace(&mut node.bytes, head_bytes);
        node.kv = head;
        let tail_node = Node {
            parent: Some(id),
            children: std::mem::replace(&mut node.children, vec![tail_id]),
            tokens: node.tokens.split_off(cut),
            keys: node.keys.split_off(blocks),
            kv: tail,
            bytes: tail_bytes,
            used: node.used,
        };
        let used = node.used;
        for &child in &tail_node.children {
            self.node_mut(child).parent = Some(tail_id);
        }
        for (b, &key) in tail_node.keys.iter().enumerate() {
            self.index.insert(key, (tail_id, b));
        }
        if tail_node.children.is_empty() && self.leaves.remove(&(used, id)) {
            self.leaves.insert((used, tail_id));
        }
        self.nodes[tail_id] = Some(tail_node);
        self.stats.bytes = self.stats.bytes + head_bytes + tail_bytes - old_bytes;
        self.stats.entries += 1;
        Some(())
    }

    /// Evicts least-recently-used leaves until the bytes held fit the budget.
    fn evict_to_budget(&mut self) {
        while self.stats.bytes > self.budget_bytes {
            let Some((used, id)) = self.leaves.pop_first() else {
                break;
            };
            let _ = used;
            let node = self.nodes[id].take().expect("a live leaf");
            self.free.push(id);
            for (b, key) in node.keys.iter().enumerate() {
                if self.index.get(key) == Some(&(id, b)) {
                    self.index.remove(key);
                }
            }
            if let Some(parent) = node.parent {
                let p = self.node_mut(parent);
                p.children.retain(|&c| c != id);
                if p.children.is_empty() {
                    let used = p.used;
                    self.leaves.insert((used, parent));
                }
            }
            self.stats.bytes -= node.bytes;
            self.stats.blocks -= node.keys.len();
            self.stats.entries -= 1;
            self.stats.evictions += 1;
        }
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

    /// A stand-in for a KV cache: positions `from..to` of a prompt, 10 bytes each.
    #[derive(Clone, Debug, PartialEq)]
    struct Kv(usize, usize);

    impl CachedPrefix for Kv {
        fn positions(&self) -> usize {
            self.1 - self.0
        }
        fn bytes(&self) -> usize {
            10 * self.positions()
        }
        fn range(&self, from: usize, to: usize) -> Option<Self> {
            (from < to && to <= self.positions()).then(|| Kv(self.0 + from, self.0 + to))
        }
        fn chain(parts: &[Self]) -> Option<Self> {
            let joined = parts.windows(2).all(|w| w[0].1 == w[1].0);
            (joined && !parts.is_empty()).then(|| Kv(parts[0].0, parts[parts.len() - 1].1))
        }
    }

    fn tokens(range: std::ops::Range<u32>) -> Vec<u32> {
        range.collect()
    }

    #[test]
    fn blocks_stored_later_are_found_by_the_next_lookup_or_after_a_flush() {
        let prompt = tokens(0..100);
        let mut cache = PrefixCache::new(10_000);
        cache.insert_later(7, &prompt, Kv(0, 100));
        assert_eq!(cache.stats().entries, 0, "nothing stored yet");
        assert_eq!(cache.lookup(7, &prompt), Some(Kv(0, 96)), "its full blocks");
        assert_eq!(cache.stats().inserts, 1);

        cache.insert_later(8, &prompt[..64], Kv(0, 64));
        assert!(cache.flush());
        assert_eq!(cache.stats().entries, 2);
        assert!(!cache.flush(), "nothing left to store");
        assert_eq!(cache.lookup(8, &prompt), Some(Kv(0, 64)));

        let mut off = PrefixCache::new(0);
        off.insert_later(7, &prompt, Kv(0, 100));
        off.flush();
        assert_eq!(off.stats().inserts, 0, "budget 0 stores nothing");
        assert!(off.lookup(7, &prompt).is_none());
    }

    #[test]
    fn every_stored_block_is_found_and_tenants_are_isolated() {
        let prompt = tokens(0..200);
        let mut cache = PrefixCache::new(10_000);
        assert_eq!(cache.lookup(7, &prompt), None);
        cache.insert(7, &prompt[..64], Kv(0, 64));
        cache.insert(7, &prompt[..128], Kv(0, 128));
        let s = cache.stats();
        assert_eq!(
            (s.entries, s.blocks, s.bytes),
            (2, 8, 1280),
            "each block once"
        );
        assert_eq!(cache.lookup(7, &prompt), Some(Kv(0, 128)));
        assert_eq!(
            cache.lookup(7, &prompt[..100]),
            Some(Kv(0, 96)),
            "to the block, inside a run"
        );
        assert_eq!(cache.lookup(8, &prompt), None, "another tenant never hits");
        let mut diverging = prompt.clone();
        diverging[70] = 0;
        assert_eq!(cache.lookup(7, &diverging), Some(Kv(0, 64)));
        let s = cache.stats();
        assert_eq!((s.hits, s.misses, s.hit_tokens), (3, 2, 128 + 96 + 64));
        assert_eq!((s.block_hits, s.block_misses), (8 + 6 + 4, 12 + 4 + 12 + 8));
        cache.insert(7, &prompt[..100], Kv(0, 100));
        assert_eq!(cache.stats().inserts, 2, "nothing new to store");
    }

    #[test]
    fn a_prompt_leaving_a_run_splits_it_and_shares_its_start() {
        let a = tokens(0..96);
        let mut b = tokens(0..48);
        b.extend(1000..1064);
        let mut cache = PrefixCache::new(10_000);
        cache.insert(1, &a, Kv(0, 96));
        cache.insert(1, &b, Kv(0, 112));
        let s = cache.stats();
        assert_eq!(s.entries, 3, "a's run split after 3 blocks; b's own run");
        assert_eq!(
            (s.blocks, s.bytes),
            (3 + 3 + 4, 1600),
            "the shared 3 blocks once"
        );
        assert_eq!(cache.lookup(1, &a), Some(Kv(0, 96)));
        assert_eq!(cache.lookup(1, &b), Some(Kv(0, 112)));
        // A third prompt through the split point and beyond a's tail.
        let mut c = a.clone();
        c.extend(2000..2032);
        cache.insert(1, &c, Kv(0, 128));
        assert_eq!(cache.lookup(1, &c), Some(Kv(0, 128)));
        assert_eq!(cache.lookup(1, &a), Some(Kv(0, 96)));
        assert_eq!(cache.stats().blocks, 3 + 3 + 4 + 2);
    }

    #[test]
    fn least_recently_used_leaves_go_first_within_the_budget() {
        let a = tokens(0..32);
        let b = tokens(100..132);
        let c = tokens(200..232);
        let mut cache = PrefixCache::new(700);
        cache.insert(1, &a, Kv(0, 32));
        cache.insert(1, &b, Kv(0, 32));
        assert!(cache.lookup(1, &a).is_some(), "a is now more recent than b");
        cache.insert(1, &c, Kv(0, 32));
        assert!(cache.lookup(1, &b).is_none(), "b was evicted");
        assert!(cache.lookup(1, &a).is_some() && cache.lookup(1, &c).is_some());
        let s = cache.stats();
        assert_eq!((s.evictions, s.bytes, s.entries), (1, 640, 2));
        cache.insert(1, &tokens(300..380), Kv(0, 80));
        assert!(
            cache.lookup(1, &tokens(300..380)).is_none(),
            "larger than the whole budget: not stored"
        );
        cache.insert(1, &a[..15], Kv(0, 15));
        assert_eq!(cache.stats().inserts, 3, "partial blocks are not stored");
    }

    #[test]
    fn a_run_others_continue_outlives_them() {
        // A shared head and two tails; the head is the oldest but is never evicted while a
        // tail continues it.
        let head = tokens(0..32);
        let tail = |from: u32| {
            let mut t = head.clone();
            t.extend(from..from + 16);
            t
        };
        let mut cache = PrefixCache::new(650);
        cache.insert(1, &head, Kv(0, 32));
        cache.insert(1, &tail(100), Kv(0, 48));
        cache.insert(1, &tail(200), Kv(0, 48));
        assert_eq!(cache.stats().bytes, 640);
        assert!(cache.lookup(1, &tail(100)).is_some());
        cache.insert(1, &tail(300), Kv(0, 48));
        let s = cache.stats();
        assert_eq!(s.evictions, 1);
        assert_eq!(
            cache.lookup(1, &tail(200)),
            Some(Kv(0, 32)),
            "the older tail went, the head stays"
        );
        assert_eq!(cache.lookup(1, &tail(100)), Some(Kv(0, 48)));
        assert_eq!(cache.lookup(1, &tail(300)), Some(Kv(0, 48)));
        // Evicting both tails frees the head last.
        let mut small = PrefixCache::new(10_000);
        small.insert(1, &tail(100), Kv(0, 48));
        small.budget_bytes = 200;
        small.insert(1, &tail(200), Kv(0, 48));
        assert_eq!(small.stats().entries, 0, "all went, leaves first");
        assert_eq!(small.stats().bytes, 0);
    }

    impl<C: CachedPrefix> PrefixCache<C> {
        /// Panics unless the tree, its index, its leaves and its counters agree.
        fn check(&self) {
            let live: Vec<(NodeId, &Node<C>)> = self
                .nodes
                .iter()
                .enumerate()
                .filter_map(|(id, n)| n.as_ref().map(|n| (id, n)))
                .collect();
            let leaves: BTreeSet<(u64, NodeId)> = live
                .iter()
                .filter(|(_, n)| n.children.is_empty())
                .map(|&(id, n)| (n.used, id))
                .collect();
            assert_eq!(leaves, self.leaves, "leaves");
            for &(id, n) in &live {
                assert_eq!(n.kv.positions(), n.tokens.len());
                assert_eq!(n.keys.len() * BLOCK_TOKENS, n.tokens.len());
                if let Some(p) = n.parent {
                    assert!(self.node(p).children.contains(&id), "parent knows {id}");
                }
                for &c in &n.children {
                    assert_eq!(self.node(c).parent, Some(id));
                }
                for (b, key) in n.keys.iter().enumerate() {
                    assert_eq!(self.index.get(key), Some(&(id, b)), "indexed");
                }
            }
            assert_eq!(
                self.index.len(),
                live.iter().map(|(_, n)| n.keys.len()).sum::<usize>()
            );
            assert_eq!(self.stats.entries, live.len());
            assert_eq!(self.stats.blocks, self.index.len());
            assert_eq!(
                self.stats.bytes,
                live.iter().map(|(_, n)| n.bytes).sum::<usize>()
            );
            assert!(self.stats.bytes <= self.budget_bytes);
        }
    }

    #[test]
    fn random_prompts_keep_the_tree_consistent_and_find_what_they_stored() {
        // Prompts of 1-8 blocks drawn from 3 choices per block position: many shared
        // starts, splits and evictions under a budget of ~12 blocks.
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let mut cache = PrefixCache::new(12 * BLOCK_TOKENS * 10);
        for _ in 0..2000 {
            let blocks = 1 + next(8) as usize;
            let prompt: Vec<u32> = (0..blocks)
                .flat_map(|b| {
                    let choice = next(3) as u32;
                    (0..BLOCK_TOKENS as u32).map(move |t| (b as u32 * 3 + choice) * 100 + t)
                })
                .collect();
            let extra = next(BLOCK_TOKENS as u64) as usize;
            let len = prompt.len();
            if next(2) == 0 {
                cache.insert(1, &prompt, Kv(0, len));
                cache.check();
                if len <= 12 * BLOCK_TOKENS {
                    assert_eq!(cache.lookup(1, &prompt), Some(Kv(0, len)), "just stored");
                }
            } else if let Some(found) = cache.lookup(1, &prompt[..len - extra.min(len - 1)]) {
                assert_eq!(found.0, 0);
                assert_eq!(found.1 % BLOCK_TOKENS, 0);
            }
            cache.check();
        }
        assert!(cache.stats().evictions > 100, "{:?}", cache.stats());
    }

    #[test]
    fn tenant_salts_differ_by_every_part() {
        assert_ne!(tenant_salt(&["key-a", ""]), tenant_salt(&["key-b", ""]));
        assert_ne!(tenant_salt(&["key-a", "x"]), tenant_salt(&["key-a", "y"]));
        assert_ne!(tenant_salt(&["ab", "c"]), tenant_salt(&["a", "bc"]));
        assert_eq!(tenant_salt(&["key-a", "x"]), tenant_salt(&["key-a", "x"]));
    }
}
