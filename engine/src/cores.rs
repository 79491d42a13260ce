//! Which CPU cores the model worker and the rest of the process run on (`--worker-core`).
//!
//! This module owns the affinity calls. Why it exists: on a GPU the model worker is the one
//! thread the accelerator waits for. Between two passes it takes the next jobs and launches
//! the next pass while the GPU is idle. With a core of its own, which no other thread of the
//! process may use, it is never queued behind request work (calibration, plugins, responses).
//!
//! What was measured (H200, 16 cores, bench/reports/h200-side-by-side-9/cores/): once a
//! batch's answers moved to their own thread (`crate::scheduler`'s answer thread) the worker
//! ran 98-99% of the window at saturation with or without the reservation. Without it, it
//! waited on a run queue at most 1.7% of the window (20-33 involuntary switches per second);
//! with it 0-0.9% (2-4 per second). Decisions per second did not rise (1-4% lower in one
//! lease, equal in another), so the default is `off`: the reservation is for hosts whose
//! request threads keep every core busy, which that host was not (decide used ~4 cores).
//!
//! The reservation is for a model on a GPU. On the CPU the worker's passes run on every core,
//! so `auto` reserves nothing there, nor on a host of fewer than [`MIN_CPUS_FOR_AUTO`] cores.
//! Linux only; elsewhere nothing is reserved.

use std::str::FromStr;

/// `auto` reserves a core only where at least this many are allowed to the process, so that
/// at least three are left for requests.
pub const MIN_CPUS_FOR_AUTO: usize = 4;

/// The `--worker-core` setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerCore {
    /// The last core allowed to the process, when the model runs on a GPU and the process
    /// may use at least [`MIN_CPUS_FOR_AUTO`] cores.
    Auto,
    /// Nothing reserved: every thread may run anywhere.
    Off,
    /// This core (its number as the OS counts them), whatever the device.
    Cpu(usize),
}

impl FromStr for WorkerCore {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "auto" => Ok(WorkerCore::Auto),
            "off" => Ok(WorkerCore::Off),
            number => number.parse().map(WorkerCore::Cpu).map_err(|_| {
                format!("`{number}` is not a core: use auto, off or a core's number (0, 1, ...)")
            }),
        }
    }
}

/// The core `setting` picks among `allowed` (the cores the process may use, ascending), for
/// a model on a GPU or not. An explicit core must be allowed and leave another.
pub fn choose(
    setting: WorkerCore,
    allowed: &[usize],
    on_gpu: bool,
) -> Result<Option<usize>, String> {
    match setting {
        WorkerCore::Off => Ok(None),
        WorkerCore::Auto if !on_gpu || allowed.len() < MIN_CPUS_FOR_AUTO => Ok(None),
        WorkerCore::Auto => Ok(allowed.last().copied()),
        WorkerCore::Cpu(core) if !allowed.contains(&core) => Err(format!(
            "core {core} is not among the cores this process may use ({allowed:?}) \
             (setting --worker-core)"
        )),
        WorkerCore::Cpu(_) if allowed.len() < 2 => Err(format!(
            "the process may use one core only ({allowed:?}): none is left for requests \
             (setting --worker-core: use off)"
        )),
        WorkerCore::Cpu(core) => Ok(Some(core)),
    }
}

/// Reserves `core` for the model worker: every thread of the process so far, and so every
/// thread they start later, may use every allowed core but that one. The worker, started
/// afterwards, moves itself there ([`pin_this_thread`]).
pub fn reserve(core: usize) -> std::io::Result<()> {
    // candle's CPU ops run on rayon's global pool, which starts on first use. Started now, its
    // threads are moved below with the rest; started later by the worker, they would all
    // inherit the worker's one core.
    rayon::current_num_threads();
    let rest: Vec<usize> = allowed()?.into_iter().filter(|&c| c != core).collect();
    for thread in os::threads()? {
        // A thread that ended meanwhile is no longer there to move.
        match os::set_affinity(thread, &rest) {
            Err(error) if error.raw_os_error() == Some(libc::ESRCH) => {}
            other => other?,
        }
    }
    Ok(())
}

/// Runs the calling thread on `core` only.
pub fn pin_this_thread(core: usize) -> std::io::Result<()> {
    os::set_affinity(0, &[core])
}

/// The cores the calling thread may use, ascending.
pub fn allowed() -> std::io::Result<Vec<usize>> {
    os::affinity(0)
}

#[cfg(target_os = "linux")]
mod os {
    use std::io::{Error, Result};

    /// Ids of the process's threads.
    pub fn threads() -> Result<Vec<libc::pid_t>> {
        std::fs::read_dir("/proc/self/task")?
            .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
            .map(Ok)
            .collect()
    }

    /// Thread `thread`'s cores (0: the calling thread).
    pub fn affinity(thread: libc::pid_t) -> Result<Vec<usize>> {
        // SAFETY: a zeroed cpu_set_t is the empty set; sched_getaffinity writes at most its size.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        let size = std::mem::size_of::<libc::cpu_set_t>();
        if unsafe { libc::sched_getaffinity(thread, size, &mut set) } != 0 {
            return Err(Error::last_os_error());
        }
        let count = 8 * size;
        // SAFETY: CPU_ISSET reads the set within its size.
        Ok((0..count)
            .filter(|&core| unsafe { libc::CPU_ISSET(core, &set) })
            .collect())
    }

    /// Lets thread `thread` (0: the calling thread) run on `cores` only.
    pub fn set_affinity(thread: libc::pid_t, cores: &[usize]) -> Result<()> {
        // SAFETY: as above; CPU_SET writes within the set, and cores beyond it are refused.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        let count = 8 * std::mem::size_of::<libc::cpu_set_t>();
        for &core in cores {
            if core >= count {
                return Err(Error::other(format!("core {core} is beyond {count} cores")));
            }
            unsafe { libc::CPU_SET(core, &mut set) };
        }
        // SAFETY: sched_setaffinity reads the set within its size.
        if unsafe { libc::sched_setaffinity(thread, std::mem::size_of_val(&set), &set) } != 0 {
            return Err(Error::last_os_error());
        }
        Ok(())
    }
}

#[cfg(not(target_os = "linux"))]
mod os {
    use std::io::{Error, Result};

    fn unsupported<T>() -> Result<T> {
        Err(Error::other("cores are reserved on Linux only"))
    }

    pub fn threads() -> Result<Vec<i32>> {
        unsupported()
    }

    pub fn affinity(_thread: i32) -> Result<Vec<usize>> {
        unsupported()
    }

    pub fn set_affinity(_thread: i32, _cores: &[usize]) -> Result<()> {
        unsupported()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_setting_parses_and_names_its_values_when_wrong() {
        assert_eq!("auto".parse(), Ok(WorkerCore::Auto));
        assert_eq!("off".parse(), Ok(WorkerCore::Off));
        assert_eq!("3".parse(), Ok(WorkerCore::Cpu(3)));
        let wrong = "last".parse::<WorkerCore>().unwrap_err();
        assert!(wrong.contains("auto, off"), "{wrong}");
    }

    #[test]
    fn auto_reserves_the_last_core_on_a_gpu_with_cores_to_spare() {
        let sixteen: Vec<usize> = (0..16).collect();
        assert_eq!(choose(WorkerCore::Auto, &sixteen, true), Ok(Some(15)));
        assert_eq!(
            choose(WorkerCore::Auto, &sixteen, false),
            Ok(None),
            "not on the CPU"
        );
        assert_eq!(
            choose(WorkerCore::Auto, &[0, 1, 2], true),
            Ok(None),
            "too few"
        );
        assert_eq!(choose(WorkerCore::Auto, &[2, 5, 7, 9], true), Ok(Some(9)));
        assert_eq!(choose(WorkerCore::Off, &sixteen, true), Ok(None));
    }

    #[test]
    fn an_explicit_core_must_be_allowed_and_leave_another() {
        assert_eq!(choose(WorkerCore::Cpu(1), &[0, 1], false), Ok(Some(1)));
        let absent = choose(WorkerCore::Cpu(4), &[0, 1], true).unwrap_err();
        assert!(absent.contains("--worker-core"), "{absent}");
        let alone = choose(WorkerCore::Cpu(0), &[0], true).unwrap_err();
        assert!(alone.contains("use off"), "{alone}");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_pinned_thread_runs_on_its_core_only() {
        let allowed = allowed().expect("affinity");
        let core = *allowed.last().expect("a core");
        let pinned = std::thread::spawn(move || {
            pin_this_thread(core).expect("pin");
            super::allowed().expect("affinity")
        })
        .join()
        .expect("thread");
        assert_eq!(pinned, vec![core]);
        assert_eq!(
            super::allowed().expect("affinity"),
            allowed,
            "others untouched"
        );
    }
}
