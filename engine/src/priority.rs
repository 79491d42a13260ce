//! Scheduling priority of the threads that prepare and answer requests, below the model
//! worker's (`--request-thread-nice`).
//!
//! This module owns the one OS call that lowers a thread's priority. Why it exists: every
//! request runs its blocking part (rendering, plugins, tokenizing, calibration, the answer)
//! on a thread of its own, and a batch's answer wakes all of its requests at once, with the
//! next requests of those clients right behind them: 91 requests at once at 256 clients, on
//! 16 cores. The model worker is one more thread among them, and while it waits for a core
//! the GPU waits for its next pass. A positive nice value on the request threads lets the
//! kernel run the worker first and them on the cores left over; with cores to spare it
//! changes nothing. Only lowering is possible without privileges, so the worker, which is
//! started before any request is served, keeps the process's priority, and a request thread
//! is lowered once, on its first request. Measured on an H200 with q15 (16 cores), it moved
//! closed-loop throughput by -2% to +5% at 8 to 256 clients, within the run-to-run noise
//! (bench/reports/h200-side-by-side-7/); it is kept for hosts with fewer spare cores.

use std::cell::Cell;

thread_local! {
    /// The nice value this thread was given (None: not yet).
    static GIVEN: Cell<Option<i32>> = const { Cell::new(None) };
}

/// Gives the calling thread nice value `nice` (at most once per thread; 0 or less: nothing).
/// A failure is logged once per thread and otherwise ignored: the thread keeps its priority.
pub fn lower_this_thread(nice: i32) {
    if nice <= 0 || GIVEN.with(Cell::get) == Some(nice) {
        return;
    }
    GIVEN.with(|given| given.set(Some(nice)));
    if let Err(error) = set_this_thread(nice) {
        tracing::warn!(nice, %error, "cannot lower a request thread's priority (--request-thread-nice)");
    }
}

/// The calling thread's nice value, where the OS has one per thread.
pub fn this_thread() -> Option<i32> {
    #[cfg(target_os = "linux")]
    {
        // On Linux PRIO_PROCESS with id 0 names the calling thread (setpriority(2), NOTES).
        // SAFETY: getpriority only reads the thread's scheduling attributes. Its -1 is also
        // a valid nice value; errno tells them apart, and for the calling thread it cannot fail.
        Some(unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) })
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

#[cfg(target_os = "linux")]
fn set_this_thread(nice: i32) -> std::io::Result<()> {
    // SAFETY: setpriority only changes the calling thread's scheduling attributes.
    match unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, nice) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

#[cfg(not(target_os = "linux"))]
fn set_this_thread(_nice: i32) -> std::io::Result<()> {
    Err(std::io::Error::other(
        "per-thread priorities are set on Linux only",
    ))
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn a_lowered_thread_keeps_its_nice_value_and_others_are_untouched() {
        let before = this_thread();
        let inside = std::thread::spawn(|| {
            // Nice values end at 19.
            let want = (this_thread().expect("linux") + 3).min(19);
            lower_this_thread(want);
            let once = this_thread();
            lower_this_thread(want);
            (want, once, this_thread())
        })
        .join()
        .expect("thread");
        assert_eq!(inside.1, Some(inside.0));
        assert_eq!(inside.2, inside.1, "a second call changes nothing");
        assert_eq!(this_thread(), before, "only the calling thread is lowered");
        lower_this_thread(0);
        assert_eq!(this_thread(), before, "0 leaves the thread as it is");
    }
}
