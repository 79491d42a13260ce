//! The threads that tokenize a long input's pieces side by side, each with a pre-tokenizer
//! of its own ([`ThreadCopies`]).
//!
//! Why: the first read over a new input tokenizes ~100 pieces of ~1 KiB each on every core.
//! On threads spawned for each call and sharing one pre-tokenizer, that paid twice for
//! nothing. Each fresh thread's stack and heap were new pages the kernel had to zero. And the
//! pre-tokenizer's regex keeps its scratch space in a pool whose fast path serves only the
//! thread that used it first: every other thread took a scratch space from a shared, locked
//! stack and gave it back for every word (`regex_automata`'s `Pool::get_slow` and
//! `put_value`, ~9% of a 28k-token input's tokenizing on 2 cores, `perf`). Here the threads
//! live as long as the tokenizer, and thread i only ever uses copy i, which it owns.

use rayon::prelude::*;

/// A pool of threads, each with its own copy of a `T`.
pub(crate) struct ThreadCopies<T> {
    pool: rayon::ThreadPool,
    copies: Vec<T>,
}

impl<T: Send + Sync> ThreadCopies<T> {
    /// `threads` threads (named `decide-{name}-N`), each making its copy with `make()`, all
    /// at once.
    pub fn new(
        name: &str,
        threads: usize,
        make: impl Fn() -> T + Sync,
    ) -> Result<Self, rayon::ThreadPoolBuildError> {
        let name = name.to_string();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads.max(1))
            .thread_name(move |i| format!("decide-{name}-{i}"))
            .build()?;
        // In the threads' order: copy i is thread i's.
        let copies = pool.broadcast(|_| make());
        Ok(Self { pool, copies })
    }

    /// `f(item, copy)` for every item, on the pool's threads (each with its own copy), the
    /// results in the items' order. The calling thread waits.
    pub fn map<I: Sync, O: Send>(&self, items: &[I], f: impl Fn(&I, &T) -> O + Sync) -> Vec<O> {
        self.pool.install(|| {
            items
                .par_iter()
                .map(|item| {
                    let thread = rayon::current_thread_index()
                        .expect("install runs the closure on the pool's threads");
                    f(item, &self.copies[thread])
                })
                .collect()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn every_item_is_mapped_in_order_with_one_copy_per_thread() {
        let made = AtomicUsize::new(0);
        // Each copy is the name of the thread that made it.
        let copies = ThreadCopies::new("test", 3, || {
            made.fetch_add(1, Ordering::Relaxed);
            std::thread::current().name().map(String::from)
        })
        .expect("a pool");
        assert_eq!(made.load(Ordering::Relaxed), 3);
        let items: Vec<usize> = (0..1000).collect();
        let seen = copies.map(&items, |&i, copy| {
            (
                i * 2,
                copy.clone(),
                std::thread::current().name().map(String::from),
            )
        });
        assert_eq!(
            seen.iter().map(|s| s.0).collect::<Vec<_>>(),
            (0..1000).map(|i| i * 2).collect::<Vec<_>>()
        );
        // A copy is only ever used on the thread that made it.
        for (_, copy, thread) in &seen {
            assert!(thread
                .as_deref()
                .is_some_and(|t| t.starts_with("decide-test-")));
            assert_eq!(copy, thread);
        }
    }
}
