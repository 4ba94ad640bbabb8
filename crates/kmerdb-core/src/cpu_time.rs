//! The host's CPU time by kind of work, summed over the threads that did it, for classify's `-vv`
//! summary. A run on two GPUs is bound by the host (its packing and finishing stages are busy
//! nearly all its pipeline), and the GPU machines have no profiler (`perf`): this measure travels
//! with the binary.
//!
//! [`charge`] (or [`start`], for the rest of a scope) times a piece of work by its thread's CPU
//! clock. Work run inside other work on the
//! same thread (a rayon thread that waits in a parallel loop runs other tasks meanwhile, such as
//! a file's parsing) is charged to its own kind and taken out of the outer piece's, so each kind
//! counts only its own time wherever it ran. Only counted while debug logging is on (`-vv`): a
//! CPU clock read is a system call.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

/// A kind of host work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Work {
    /// Finding and parsing the input's records (`input::records`).
    Parse,
    /// Gathering records into a batch and checking mates' names (the reading stage).
    Batch,
    /// Packing a batch into a GPU lane's pinned memory.
    Pack,
    /// A GPU lane's thread: uploads, launches, waits and downloads.
    Gpu,
    /// The decision and formatting the per-read lines.
    Finish,
    /// Of finishing: weak calls' evidence (the rule's check; on GPUs also their reads sketched
    /// again).
    Evidence,
    /// Of finishing on GPUs: reads the GPU left to the CPU, classified there whole.
    Fallback,
    /// Writing the outputs.
    Write,
}

const KINDS: usize = 8;
const NAMES: [&str; KINDS] = [
    "parsing",
    "batching",
    "packing",
    "GPU lanes",
    "finishing",
    "weak calls' evidence",
    "reads left to the CPU",
    "writing",
];
static NANOS: [AtomicU64; KINDS] = [const { AtomicU64::new(0) }; KINDS];

thread_local! {
    /// CPU time charged by pieces of work inside the one running on this thread.
    static INNER: Cell<u64> = const { Cell::new(0) };
}

/// The calling thread's CPU time in nanoseconds (0 where the clock cannot be read).
fn thread_nanos() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid timespec to write.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Runs `f`, charging the CPU time this thread spends in it, less what work inside it charged,
/// to `work`.
pub fn charge<R>(work: Work, f: impl FnOnce() -> R) -> R {
    let _charged = start(work);
    f()
}

/// Charges to `work` the CPU time this thread spends until the value is dropped (the rest of the
/// scope it is bound in, `let _cpu = start(...)`), less what work inside it charged.
pub fn start(work: Work) -> Charged {
    if !log::log_enabled!(log::Level::Debug) {
        return Charged(None);
    }
    let outer = INNER.replace(0);
    Charged(Some((work, outer, thread_nanos())))
}

/// A piece of work being timed ([`start`]): its kind, what the work around it had charged from
/// inside before it began, and its thread's CPU clock when it began.
pub struct Charged(Option<(Work, u64, u64)>);

impl Drop for Charged {
    fn drop(&mut self) {
        let Some((work, outer, start)) = self.0 else { return };
        let spent = thread_nanos().saturating_sub(start);
        let inner = INNER.replace(outer + spent);
        NANOS[work as usize].fetch_add(spent.saturating_sub(inner), Ordering::Relaxed);
    }
}

/// The sums so far, by kind.
pub fn totals() -> [u64; KINDS] {
    std::array::from_fn(|i| NANOS[i].load(Ordering::Relaxed))
}

/// The process's CPU time (user and system, all threads) in nanoseconds.
fn process_nanos() -> u64 {
    // SAFETY: rusage is plain integers, for which all zeros is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid rusage to write.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return 0;
    }
    let tv = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// "parsing 6.12 s, ..., the process 48.3 s": the kinds' time since `since` (a [`totals`]) and
/// the process's whole CPU time.
pub fn describe(since: [u64; KINDS]) -> String {
    let now = totals();
    let secs = |n: u64| n as f64 / 1e9;
    let kinds: Vec<String> =
        (0..KINDS).map(|i| format!("{} {:.2} s", NAMES[i], secs(now[i].saturating_sub(since[i])))).collect();
    format!("{}; the process {:.2} s in all", kinds.join(", "), secs(process_nanos()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn busy(ms: u64) {
        let until = thread_nanos() + ms * 1_000_000;
        while thread_nanos() < until {
            std::hint::black_box(0u64);
        }
    }

    /// Work inside other work counts as its own kind only. (Charged only with debug logging on:
    /// the test turns it on for the process.)
    #[test]
    fn inner_work_is_taken_out_of_the_outer() {
        log::set_max_level(log::LevelFilter::Debug);
        struct Any;
        impl log::Log for Any {
            fn enabled(&self, _: &log::Metadata) -> bool {
                true
            }
            fn log(&self, _: &log::Record) {}
            fn flush(&self) {}
        }
        let _ = log::set_logger(&Any);
        if !log::log_enabled!(log::Level::Debug) {
            return; // another logger without debug took the process first
        }
        let before = totals();
        charge(Work::Write, || {
            busy(30);
            charge(Work::Batch, || busy(20));
        });
        let after = totals();
        let got = |w: Work| (after[w as usize] - before[w as usize]) as f64 / 1e6;
        assert!((29.0..45.0).contains(&got(Work::Write)), "writing {} ms", got(Work::Write));
        assert!((19.0..35.0).contains(&got(Work::Batch)), "batching {} ms", got(Work::Batch));
        assert!(describe(before).contains("writing 0.0"), "{}", describe(before));
    }
}
