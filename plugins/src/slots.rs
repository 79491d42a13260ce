//! Instance slots: how many plugin instances may be alive at once, so that wasmtime's pooling
//! allocator never runs out under load.
//!
//! The pool has a fixed number of slots for component instances, and separately for the core
//! instances, memories and tables inside them; a component built for `wasm32-wasip2` is
//! several core instances (the module and its shims) and tables. When any of those totals ran
//! out, instantiation failed and the question was answered as if its plugin had trapped: on the
//! H200 at 256 concurrent clients, 98% of requests got 422 "maximum concurrent limit of 1000
//! for core instances reached", because requests waiting for the model keep their instances
//! ([`super::runtime::Session`]). Here the pool is sized per component (each may use at most
//! [`CORE_INSTANCES_PER_COMPONENT`] core instances, one memory and [`TABLES_PER_COMPONENT`]
//! tables: a component needing more fails to instantiate, at its upload self-test), and every
//! live instance, kept or in a call, holds one of [`COMPONENT_INSTANCES`] slots: a call that
//! finds none free waits (calls last microseconds; kept instances go with their request),
//! never fails because others are busy.

use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use wasmtime::PoolingAllocationConfig;

/// Component instances alive at once, in all engines of the process together.
pub const COMPONENT_INSTANCES: u32 = 1000;
/// Core instances one component may have (rustc's `wasm32-wasip2` components have 2-4).
pub const CORE_INSTANCES_PER_COMPONENT: u32 = 8;
/// Tables one component may have.
pub const TABLES_PER_COMPONENT: u32 = 4;

static FREE: Mutex<u32> = Mutex::new(COMPONENT_INSTANCES);
static FREED: Condvar = Condvar::new();

/// The pool's totals: every component instance fits whatever the others use.
pub fn size(pool: &mut PoolingAllocationConfig) {
    pool.total_component_instances(COMPONENT_INSTANCES)
        .max_core_instances_per_component(CORE_INSTANCES_PER_COMPONENT)
        .total_core_instances(COMPONENT_INSTANCES * CORE_INSTANCES_PER_COMPONENT)
        .max_memories_per_component(1)
        .total_memories(COMPONENT_INSTANCES)
        .max_tables_per_component(TABLES_PER_COMPONENT)
        .total_tables(COMPONENT_INSTANCES * TABLES_PER_COMPONENT);
}

/// The right to one live instance; freed when dropped (after the store it was taken for:
/// declare it before the store, or after it in a struct).
#[derive(Debug)]
pub struct Slot(());

impl Slot {
    /// A free slot, waiting for one up to `within`; `None` when none came free in time.
    pub fn take(within: Duration) -> Option<Slot> {
        let deadline = Instant::now() + within;
        let mut free = FREE.lock().unwrap_or_else(|p| p.into_inner());
        while *free == 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            free = FREED
                .wait_timeout(free, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        *free -= 1;
        Some(Slot(()))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        *FREE.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        FREED.notify_one();
    }
}
