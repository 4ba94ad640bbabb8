//! `--gpus all`: whether the CPU would finish a run before the GPUs would, judged before anything
//! starts from the reads' size, the index (its size, how much of it is in memory) and the rates of
//! this machine.
//!
//! The CPU path is bound by the index's random reads: its rate falls as the index outgrows the
//! caches, and grows with threads less than linearly (they share the memory). The GPU path pays a
//! start, the index's copy to the GPU and, the first time on a machine, its kernels' compilation,
//! then classifies several times faster, also less so on a large index. Both read an index that is
//! not in memory from the disk first (the CPU in random page faults, so no faster). The rates and
//! their fall with the index's size were measured on dev and on the device at 86 MB and at 8.5-13
//! GB (bench/results/HISTORY.md, "The device choice"); the index's copy rate is measured on this machine by
//! every GPU classification and kept in the cache folder (`record_upload`), as the compiled
//! kernels are: before (1.5 GB/s assumed), a 13 GB index's copy was judged to take 9 s, not the
//! half second it took, and the CPU was chosen at 2.5x the GPU's time.

use super::ClassifyConfig;
use crate::index::Index;
use std::path::PathBuf;

/// Under `--gpus all`, the reason to classify on the CPU when it would finish before the GPUs
/// ([`estimate`]): judged from the reads' size (FASTQ holds about 2 bytes a base; a compressed
/// file about 4 times its size), the index and this machine's rates. `None` (the GPUs) for stdin
/// and pipes, whose size is not known.
pub(super) fn cpu_is_faster(config: &ClassifyConfig, index: &Index) -> Option<String> {
    let mut bytes = 0u64;
    for sample in &config.samples {
        for source in sample.reads.sources() {
            let crate::input::Source::File(p) = source else { return None };
            // A named pipe's size is not known, like stdin's.
            let size = std::fs::metadata(p).ok().filter(|m| m.is_file())?.len();
            let mut head = [0u8; 6];
            let compressed = std::fs::File::open(p)
                .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut head))
                .is_ok_and(|()| crate::input::decompress::detect(&head) != crate::input::decompress::Compression::None);
            bytes += if compressed { size * 4 } else { size };
        }
    }
    let shape = RunShape {
        bases: bytes as f64 / 2.0,
        threads: config.threads,
        index_bytes: index.file_size(),
        resident: index.resident_fraction(),
        kernels_cached: crate::gpu::kernels::cached(),
    };
    let upload = upload_rate();
    let e = estimate(&shape, upload);
    log::debug!(
        "device choice: {:.0} M bases, {} threads, index {} ({:.0}% in memory), copy {:.1} GB/s: CPU about {:.2} s, GPU {:.2} s",
        shape.bases / 1e6,
        shape.threads,
        crate::resources::human_bytes(shape.index_bytes),
        shape.resident * 100.0,
        upload / 1e9,
        e.cpu,
        e.gpu
    );
    (e.cpu < e.gpu).then(|| {
        format!(
            "about {:.0} M bases to classify: {} threads take about {:.2} s, less than the GPU would with its start ({:.2} s{}); classifying on the CPU (--gpus 0 uses the GPU anyway)",
            shape.bases / 1e6,
            config.threads,
            e.cpu,
            e.gpu,
            if shape.kernels_cached { "" } else { ", compiling its kernels the first time" }
        )
    })
}

/// Bases a second one CPU thread classifies against an index that fits the caches.
const CPU_BASES_PER_THREAD: f64 = 25e6;
/// How the CPU's threads add up: `threads^0.74` (2 threads on dev and 16 and 32 on the device's
/// hosts, all against the 86 MB refs index).
const CPU_THREAD_EXPONENT: f64 = 0.74;
/// Bases a second a GPU classifies end to end against an index that fits its caches.
const GPU_BASES_PER_SECOND: f64 = 1.5e9;
/// Index size from which the rates fall, and how fast: `(size / knee)^-exponent`.
const INDEX_KNEE_BYTES: f64 = 1e8;
const CPU_INDEX_EXPONENT: f64 = 0.22;
const GPU_INDEX_EXPONENT: f64 = 0.2;
const GPU_START_SECONDS: f64 = 0.3;
const KERNEL_COMPILE_SECONDS: f64 = 4.5;
/// The index's copy to the GPU until this machine has measured it (pageable memory on the device:
/// 9.5 GB/s; pinned 55 GB/s).
const DEFAULT_UPLOAD_BYTES_PER_SECOND: f64 = 10e9;
/// Reading an index that is not in memory.
const DISK_BYTES_PER_SECOND: f64 = 1e9;

/// What the choice is judged from.
#[derive(Debug, Clone, Copy)]
pub struct RunShape {
    /// Bases to classify.
    pub bases: f64,
    pub threads: usize,
    pub index_bytes: u64,
    /// Share of the index in the page cache (0 to 1).
    pub resident: f64,
    pub kernels_cached: bool,
}

/// The two devices' expected times, in seconds.
#[derive(Debug, Clone, Copy)]
pub struct Estimate {
    pub cpu: f64,
    pub gpu: f64,
}

/// How much slower a path gets on an index of `bytes`.
fn index_factor(bytes: u64, exponent: f64) -> f64 {
    (INDEX_KNEE_BYTES / (bytes as f64).max(1.0)).powf(exponent).min(1.0)
}

/// The expected times of `shape` on the CPU and on the GPUs, copying the index at `upload`
/// bytes a second.
pub fn estimate(shape: &RunShape, upload: f64) -> Estimate {
    let size = shape.index_bytes as f64;
    let from_disk = size * (1.0 - shape.resident.clamp(0.0, 1.0)) / DISK_BYTES_PER_SECOND;
    let threads = (shape.threads.max(1) as f64).powf(CPU_THREAD_EXPONENT);
    let cpu_rate = CPU_BASES_PER_THREAD * index_factor(shape.index_bytes, CPU_INDEX_EXPONENT) * threads;
    let gpu_rate = GPU_BASES_PER_SECOND * index_factor(shape.index_bytes, GPU_INDEX_EXPONENT);
    let compile = if shape.kernels_cached { 0.0 } else { KERNEL_COMPILE_SECONDS };
    Estimate {
        cpu: from_disk + shape.bases / cpu_rate,
        gpu: GPU_START_SECONDS + compile + from_disk + size / upload + shape.bases / gpu_rate,
    }
}

/// The file the measured copy rate is kept in, beside the compiled kernels.
fn rates_file() -> Option<PathBuf> {
    crate::gpu::kernels::cache_dir().map(|d| d.join("rates.json"))
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Rates {
    index_upload_bytes_per_second: f64,
}

/// The index's copy rate to the GPU on this machine: the last one measured, else a default.
pub(crate) fn upload_rate() -> f64 {
    rates_file().map_or(DEFAULT_UPLOAD_BYTES_PER_SECOND, |p| upload_rate_in(&p))
}

fn upload_rate_in(path: &std::path::Path) -> f64 {
    std::fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice::<Rates>(&b).ok())
        .map(|r| r.index_upload_bytes_per_second)
        .filter(|r| r.is_finite() && *r > 0.0)
        .unwrap_or(DEFAULT_UPLOAD_BYTES_PER_SECOND)
}

/// Copies from this size on are timed by their bytes; a smaller one is mostly its fixed costs
/// (a 115 MB index copied at 1.0 GB/s where 12 GB went at 35 GB/s on the same machine), so it
/// only ever raises the kept rate.
const TIMED_COPY_BYTES: u64 = 1 << 30;

/// Keeps the copy rate a GPU classification measured (`bytes` in `seconds`) for the next run's
/// choice. A copy too small to time says nothing, a small one only raises the rate
/// ([`TIMED_COPY_BYTES`]); a cache that cannot be written only keeps the default.
pub(crate) fn record_upload(bytes: u64, seconds: f64) {
    if let Some(path) = rates_file() {
        record_upload_in(&path, bytes, seconds);
    }
}

fn record_upload_in(path: &std::path::Path, bytes: u64, seconds: f64) {
    if bytes < 64 << 20 || seconds <= 0.0 {
        return;
    }
    let rate = bytes as f64 / seconds;
    if bytes < TIMED_COPY_BYTES && rate <= upload_rate_in(path) {
        return;
    }
    let rates = Rates { index_upload_bytes_per_second: rate };
    let Ok(json) = serde_json::to_vec(&rates) else { return };
    let written = path.parent().map(std::fs::create_dir_all).transpose().ok().and_then(|_| {
        // Written whole under a name of this process, then renamed: two runs at once each leave
        // a whole file, and a failed write leaves nothing behind.
        let temp = path.with_extension(format!("json.{}.tmp", std::process::id()));
        let done = std::fs::write(&temp, json).and_then(|()| std::fs::rename(&temp, path));
        if done.is_err() {
            let _ = std::fs::remove_file(&temp);
        }
        done.ok()
    });
    if written.is_none() {
        log::debug!("could not keep the measured index copy rate in {}", path.display());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(pairs: f64, threads: usize, index_bytes: u64) -> RunShape {
        RunShape { bases: pairs * 300.0, threads, index_bytes, resident: 1.0, kernels_cached: true }
    }

    /// The three cases the issue names, as measured on the device (16-32 threads): the mock
    /// (39,504 pairs against the 86 MB refs index) is the CPU's; 4 M pairs against a 13 GB index
    /// and 20 M pairs against the 86 MB one are the GPU's. And what the old rates got wrong: 2 M
    /// pairs against the 8.5 GB index took 2.5 s on the GPU and 5.2 s on 32 threads.
    #[test]
    fn the_measured_cases_choose_the_faster_device() {
        let upload = 20e9;
        for threads in [16, 32] {
            let mock = estimate(&shape(39_504.0, threads, 86_000_000), upload);
            assert!(mock.cpu < mock.gpu, "{mock:?}");
            let large = estimate(&shape(4e6, threads, 13_100_000_000), upload);
            assert!(large.gpu < large.cpu, "{large:?}");
            let many = estimate(&shape(20e6, threads, 86_000_000), upload);
            assert!(many.gpu < many.cpu, "{many:?}");
            let scale = estimate(&shape(2e6, threads, 8_490_000_000), upload);
            assert!(scale.gpu < scale.cpu, "{scale:?}");
        }
        // The measured times, within a factor of 2: 20 M pairs against the small index on 16
        // threads 29.9 s on the CPU; 4 M pairs against 13 GB 8.35 s (32 threads) and 3.9 s on one GPU.
        let many = estimate(&shape(20e6, 16, 86_000_000), upload);
        assert!((15.0..60.0).contains(&many.cpu), "{many:?}");
        let large = estimate(&shape(4e6, 32, 13_100_000_000), upload);
        assert!((4.0..17.0).contains(&large.cpu) && (2.0..8.0).contains(&large.gpu), "{large:?}");
    }

    /// An index on the disk costs both paths its reading; uncompiled kernels cost the GPU.
    #[test]
    fn reading_the_index_and_compiling_cost_what_they_should() {
        let cached = estimate(&shape(1e6, 8, 5_000_000_000), 20e9);
        let cold = estimate(&RunShape { resident: 0.0, ..shape(1e6, 8, 5_000_000_000) }, 20e9);
        assert!((cold.cpu - cached.cpu - 5.0).abs() < 1e-9 && (cold.gpu - cached.gpu - 5.0).abs() < 1e-9);
        let uncompiled = estimate(&RunShape { kernels_cached: false, ..shape(1e6, 8, 5_000_000_000) }, 20e9);
        assert!((uncompiled.gpu - cached.gpu - KERNEL_COMPILE_SECONDS).abs() < 1e-9);
    }

    #[test]
    fn a_measured_upload_rate_is_kept_for_the_next_run() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cache/rates.json");
        assert_eq!(upload_rate_in(&path), DEFAULT_UPLOAD_BYTES_PER_SECOND);
        record_upload_in(&path, 1 << 20, 1.0);
        assert_eq!(upload_rate_in(&path), DEFAULT_UPLOAD_BYTES_PER_SECOND, "too small to time");
        record_upload_in(&path, 115_000_000, 0.115);
        assert_eq!(upload_rate_in(&path), DEFAULT_UPLOAD_BYTES_PER_SECOND, "a small copy's fixed costs");
        record_upload_in(&path, 8 << 30, 0.5);
        assert_eq!(upload_rate_in(&path), (8u64 << 30) as f64 / 0.5);
        record_upload_in(&path, 8 << 30, 4.0);
        assert_eq!(upload_rate_in(&path), (8u64 << 30) as f64 / 4.0, "a large copy's rate, also a slower one");
        record_upload_in(&path, 500_000_000, 0.01);
        assert_eq!(upload_rate_in(&path), 5e10, "a small copy faster than the kept rate");
        std::fs::write(&path, "not json").unwrap();
        assert_eq!(upload_rate_in(&path), DEFAULT_UPLOAD_BYTES_PER_SECOND, "a damaged file is the default");
    }
}
