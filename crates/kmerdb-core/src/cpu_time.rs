//! The host's CPU time by kind of work, summed over the threads that did it, for classify's `-vv`
//! summary. A run on two GPUs is bound by the host (its packing and finishing stages are busy
//! nearly all its pipeline), and the GPU machines have no profiler (`perf`): this measure travels
//! with the binary.
//!
//! [`charge`] (or [`start`], for the rest of a scope) times a piece of work by its thread's CPU
//! clock. Work run inside other work on the
//! same thread (a rayon thread that waits in a parallel loop runs other tasks meanwhile, such as
//! a file's parsing) is charged to its own kind and taken out of the outer piece's, so each kind
//! counts only its own time wherever it ran; work inside work of its own kind is the outer piece's
//! (its clock is not read again). Only counted while debug logging is on (`-vv`): a
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
    /// The kind of the innermost work being timed on this thread.
    static CURRENT: Cell<Option<Work>> = const { Cell::new(None) };
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
    // Inside work of the same kind there is nothing to take out: the outer piece's clock counts
    // it, and reading the clock (a system call) again for it cost each of a GPU run's weak calls
    // about 1.5 µs more.
    if !log::log_enabled!(log::Level::Debug) || CURRENT.get() == Some(work) {
        return Charged(None);
    }
    let outer = INNER.replace(0);
    let around = CURRENT.replace(Some(work));
    Charged(Some(Timing { work, outer, around, start: thread_nanos() }))
}

/// A piece of work being timed ([`start`]), `None` where it is not.
pub struct Charged(Option<Timing>);

/// A timed piece of work: its kind, what the work around it had charged from inside before it
/// began, the kind of that work, and its thread's CPU clock when it began.
struct Timing {
    work: Work,
    outer: u64,
    around: Option<Work>,
    start: u64,
}

impl Drop for Charged {
    fn drop(&mut self) {
        let Some(Timing { work, outer, around, start }) = self.0.take() else { return };
        let spent = thread_nanos().saturating_sub(start);
        let inner = INNER.replace(outer + spent);
        CURRENT.set(around);
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
            charge(Work::Batch, || {
                busy(10);
                // The same kind inside: counted once, by the outer piece.
                charge(Work::Batch, || busy(10));
                // Another kind inside that: its own, and out of batching's.
                charge(Work::Pack, || busy(15));
            });
            // Back in writing after the inner pieces end.
            charge(Work::Write, || busy(5));
        });
        let after = totals();
        let got = |w: Work| (after[w as usize] - before[w as usize]) as f64 / 1e6;
        assert!((34.0..52.0).contains(&got(Work::Write)), "writing {} ms", got(Work::Write));
        assert!((19.0..35.0).contains(&got(Work::Batch)), "batching {} ms", got(Work::Batch));
        assert!((14.0..28.0).contains(&got(Work::Pack)), "packing {} ms", got(Work::Pack));
        assert!(describe(before).contains("writing 0.0"), "{}", describe(before));
    }
}
