//! Which beginnings a tenant's short prompts share, so the prefix cache can store them once.
//!
//! A one-question request with a short prompt is not worth storing whole: its prompt is read
//! in a packed pass and its KV is dropped (see [`crate::scheduler`]). But consecutive short
//! prompts of one tenant usually start alike: the chat-template header, a system message,
//! often the same input under different questions. On q15 the short benchmark's prompts are
//! ~95 tokens, of which the first ~53 are the same for every question; computing them once
//! halves the tokens each later question costs (vLLM's prefix cache does the same at 16-token
//! blocks).
//!
//! This remembers, per prefix-cache salt (a tenant and its `prompt_cache_key`), the beginning
//! of the last short prompt seen, and says how many tokens a new one has in common with it.
//! The scheduler prefills that common part once (to a block boundary) and stores it; the next
//! prompts find it in the cache. Memory is bounded: at most [`RecentStarts::SALTS`] salts,
//! least recently used evicted, each at most the prompt length the caller passes (the
//! scheduler passes prompts shorter than its store threshold). Salts keep tenants apart: a
//! prompt is only ever compared with the same salt's.

use hashlink::LruCache;

/// The last short prompt's beginning per salt.
pub struct RecentStarts {
    last: LruCache<u64, Vec<u32>>,
}

impl Default for RecentStarts {
    fn default() -> Self {
        RecentStarts {
            last: LruCache::new(Self::SALTS),
        }
    }
}

impl RecentStarts {
    /// Salts remembered at once (~2 MiB at 512 tokens each).
    pub const SALTS: usize = 1024;

    /// How many leading tokens `tokens` shares with the last prompt remembered for `salt`
    /// (0 if none), and remembers `tokens` as that salt's last prompt.
    pub fn common_start(&mut self, salt: u64, tokens: &[u32]) -> usize {
        match self.last.get_mut(&salt) {
            Some(last) => {
                let common = common_prefix_len(last, tokens);
                last.clear();
                last.extend_from_slice(tokens);
                common
            }
            None => {
                self.last.insert(salt, tokens.to_vec());
                0
            }
        }
    }
}

fn common_prefix_len(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_common_start_is_with_the_same_salts_last_prompt() {
        let mut recent = RecentStarts::default();
        assert_eq!(recent.common_start(1, &[1, 2, 3, 4]), 0, "nothing seen yet");
        assert_eq!(
            recent.common_start(2, &[1, 2, 3, 4]),
            0,
            "another salt's prompt is not compared"
        );
        assert_eq!(recent.common_start(1, &[1, 2, 9]), 2);
        // The last prompt is now [1, 2, 9].
        assert_eq!(recent.common_start(1, &[1, 2, 9, 7]), 3);
        assert_eq!(recent.common_start(1, &[5]), 0);
    }

    #[test]
    fn salts_beyond_the_bound_evict_the_least_recently_used() {
        let mut recent = RecentStarts::default();
        for salt in 0..=RecentStarts::SALTS as u64 {
            recent.common_start(salt, &[7, 7]);
        }
        assert_eq!(recent.last.len(), RecentStarts::SALTS);
        assert_eq!(recent.common_start(0, &[7, 7]), 0, "salt 0 was evicted");
        assert_eq!(recent.common_start(RecentStarts::SALTS as u64, &[7, 7]), 2);
    }
}
