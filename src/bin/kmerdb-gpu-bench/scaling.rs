//! Scaling over several GPUs, device side, as in the seed papers' figures (multi-GPU HashGraph,
//! WarpCore's distributed mode): the data already in memory, each phase timed on its own with
//! every GPU finished before the next phase starts, so the split is exact (the build itself
//! overlaps the phases; its end-to-end times are in `main.rs`).
//!
//! - Classify: the index spread over the GPUs, simulated pairs in host memory; `classify_on`
//!   (each GPU a share of every batch), timed by stage: upload (packing and copying), lookup
//!   (the kernels) and download.
//! - Peer bandwidth in the same run: one pair of GPUs, every pair at once, and a copy within one
//!   GPU for reference.
//!
//! Weak scaling keeps the work per GPU fixed (efficiency T1 / Tn); strong scaling keeps the total
//! fixed (efficiency T1 / (n Tn)).

use kmerdb::gpu::Gpu;
use kmerdb::gpu::address::DevAddr;
use kmerdb::gpu::multi::{enable_peer_access, queue_peer_copy};
use std::time::{Duration, Instant};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Runs `f(d)` for every GPU index `d` on its own thread and returns the wall time.
fn on_each<T: Send>(n: usize, f: impl Fn(usize) -> Result<T> + Sync) -> Result<(Vec<T>, Duration)> {
    let start = Instant::now();
    let out = std::thread::scope(|scope| {
        let f = &f;
        let jobs: Vec<_> = (0..n).map(|d| scope.spawn(move || f(d).map_err(|e| e.to_string()))).collect();
        jobs.into_iter()
            .map(|j| j.join().expect("a GPU thread does not panic"))
            .collect::<std::result::Result<Vec<_>, _>>()
    })?;
    Ok((out, start.elapsed()))
}

fn efficiency(t1: Duration, tn: Duration, n: usize, weak: bool) -> f64 {
    let e = t1.as_secs_f64() / tn.as_secs_f64();
    100.0 * if weak { e } else { e / n as f64 }
}

/// Copy bandwidth: GPU 0 to 1, every ordered pair at once (a stream per pair), and within GPU 0.
pub fn peer_bandwidth(gpus: &[Gpu]) -> Result<()> {
    const BYTES: usize = 1 << 30;
    let n = gpus.len();
    let refs: Vec<&Gpu> = gpus.iter().collect();
    if n > 1 {
        enable_peer_access(&refs)?;
    }
    let bufs: Vec<_> = gpus.iter().map(|g| g.stream.alloc_zeros::<u8>(BYTES)).collect::<std::result::Result<_, _>>()?;
    let dsts: Vec<_> = gpus.iter().map(|g| g.stream.alloc_zeros::<u8>(BYTES)).collect::<std::result::Result<_, _>>()?;
    for g in gpus {
        g.stream.synchronize()?;
    }
    let timed = |f: &dyn Fn() -> Result<()>| -> Result<f64> {
        let mut v = Vec::new();
        for _ in 0..5 {
            let t = Instant::now();
            f()?;
            v.push(t.elapsed().as_secs_f64());
        }
        Ok(crate::median(v))
    };
    let g0 = &gpus[0];
    let within = timed(&|| {
        // SAFETY: both buffers hold BYTES and live past the synchronize below.
        unsafe { queue_peer_copy(g0, DevAddr::of(g0, &dsts[0]), g0, DevAddr::of(g0, &bufs[0]), BYTES, &g0.stream) }?;
        g0.stream.synchronize()?;
        Ok(())
    })?;
    print!("peer bandwidth: within GPU 0 {:.0} GB/s (read + write)", BYTES as f64 / within / 1e9);
    if n > 1 {
        let s = gpus[1].ctx.new_stream()?;
        let pair = timed(&|| {
            let (dst, src) = (DevAddr::of(&gpus[1], &dsts[1]), DevAddr::of(g0, &bufs[0]));
            // SAFETY: as above.
            unsafe { queue_peer_copy(&gpus[1], dst, g0, src, BYTES, &s) }?;
            s.synchronize()?;
            Ok(())
        })?;
        // Every ordered pair at once: each GPU sends a share of its buffer to each other GPU.
        let chunk = BYTES / (n - 1);
        let streams: Vec<_> =
            (0..n * n).map(|i| gpus[i / n].ctx.new_stream()).collect::<std::result::Result<_, _>>()?;
        let all = timed(&|| {
            for d in 0..n {
                for (k, g) in (0..n).filter(|&g| g != d).enumerate() {
                    let (dst, src) = (&gpus[d], &gpus[g]);
                    let at = k * chunk;
                    // SAFETY: k * chunk + chunk <= BYTES, which both buffers hold; they live past
                    // the synchronizes below.
                    unsafe {
                        queue_peer_copy(
                            dst,
                            DevAddr::at(dst, &dsts[d], at),
                            src,
                            DevAddr::at(src, &bufs[g], at),
                            chunk,
                            &streams[d * n + g],
                        )
                    }?;
                }
            }
            for s in &streams {
                s.synchronize()?;
            }
            Ok(())
        })?;
        let moved = (n * (n - 1) * chunk) as f64;
        print!(
            "; GPU 0 to 1 {:.0} GB/s; all {} ordered pairs of {n} GPUs at once {:.0} GB/s in all, {:.0} GB/s into each GPU",
            BYTES as f64 / pair / 1e9,
            n * (n - 1),
            moved / all / 1e9,
            moved / all / 1e9 / n as f64
        );
    }
    println!(" (1 GiB each, median of 5)");
    Ok(())
}

/// The stage times of classifying `pairs` on `gpus`, in batches of `batch` pairs per GPU.
fn classify_stages(
    gpus: &[Gpu],
    index: &kmerdb::index::Index,
    pairs: &[(Vec<u8>, Vec<u8>)],
    batch: usize,
) -> Result<(Duration, kmerdb::gpu::classify::StageTimes)> {
    use kmerdb::gpu::classify::{GpuClassifier, HitLists, classify_on};
    let classifiers = GpuClassifier::on_gpus(gpus, index, 2, 600)?;
    let batches: Vec<&[(Vec<u8>, Vec<u8>)]> = pairs.chunks(batch * gpus.len()).collect();
    let run = |chunk: &[(Vec<u8>, Vec<u8>)]| -> Result<()> {
        let mates: Vec<[&[u8]; 2]> = chunk.iter().map(|(a, b)| [a.as_slice(), b.as_slice()]).collect();
        let reads: Vec<&[&[u8]]> = mates.iter().map(|m| m.as_slice()).collect();
        classify_on(&classifiers, &reads, HitLists::Taxa)?.recycle(&classifiers);
        Ok(())
    };
    // One batch first, not timed: it allocates the pinned staging and result vectors, as the
    // first batch of every run does.
    run(batches[0])?;
    let before: Vec<_> = classifiers.iter().map(|c| c.times()).collect();
    let start = Instant::now();
    for chunk in &batches {
        run(chunk)?;
    }
    let wall = start.elapsed();
    // Each stage's time on the GPU that took longest in it.
    let mut slowest = kmerdb::gpu::classify::StageTimes::default();
    for (c, b) in classifiers.iter().zip(&before) {
        let t = c.times();
        slowest.upload = slowest.upload.max(t.upload - b.upload);
        slowest.kernels = slowest.kernels.max(t.kernels - b.kernels);
        slowest.download = slowest.download.max(t.download - b.download);
        slowest.reads += t.reads - b.reads;
        slowest.batches += t.batches - b.batches;
    }
    Ok((wall, slowest))
}

/// Weak and strong scaling of classify's GPU stages on the GPU counts `sets` (prefixes of `gpus`),
/// with `index` and simulated `pairs`.
pub fn classify_scaling(
    gpus: &[Gpu],
    sets: &[usize],
    index: &kmerdb::index::Index,
    pairs: &[(Vec<u8>, Vec<u8>)],
    per_gpu: usize,
    total: usize,
) -> Result<()> {
    const BATCH: usize = 1 << 18;
    for (weak, count) in [(true, per_gpu), (false, total)] {
        let mut first: Option<(Duration, kmerdb::gpu::classify::StageTimes)> = None;
        for &n in sets {
            let take = (if weak { count * n } else { count }).min(pairs.len());
            let mut runs = (0..3)
                .map(|_| classify_stages(&gpus[..n], index, &pairs[..take], BATCH))
                .collect::<Result<Vec<_>>>()?;
            runs.sort_by_key(|r| r.0);
            let (wall, t) = runs[1];
            let base = *first.get_or_insert((wall, t));
            println!(
                "scaling, classify {} on {n} GPU(s): {:.1} M pairs in {:.0} ms = {:.2} M pairs/s; slowest GPU: upload {:.0} ms, lookup {:.0} ms, download {:.0} ms; efficiency {:.0}% (lookup {:.0}%)",
                if weak { "weak" } else { "strong" },
                take as f64 / 1e6,
                wall.as_secs_f64() * 1e3,
                take as f64 / wall.as_secs_f64() / 1e6,
                t.upload.as_secs_f64() * 1e3,
                t.kernels.as_secs_f64() * 1e3,
                t.download.as_secs_f64() * 1e3,
                efficiency(base.0, wall, n, weak),
                efficiency(base.1.kernels, t.kernels, n, weak),
            );
        }
    }
    Ok(())
}

/// The random-CAS limit of each GPU alone and of all GPUs at once (each on its own thread): what
/// the insert phase can reach when every GPU inserts together.
pub fn cas_together(gpus: &[Gpu]) -> Result<()> {
    let n: usize = 1 << 30; // 8 GiB of u64 per GPU
    let arrays: Vec<_> = gpus.iter().map(|g| g.stream.alloc_zeros::<u64>(n)).collect::<std::result::Result<_, _>>()?;
    let rate = |d: usize| -> Result<f64> {
        let runs = (0..3).map(|run| crate::cas_rate(&gpus[d], &arrays[d], run)).collect::<Result<Vec<_>>>()?;
        Ok(crate::median(runs))
    };
    let alone: Vec<f64> = (0..gpus.len()).map(rate).collect::<Result<_>>()?;
    let (together, _) = on_each(gpus.len(), rate)?;
    let fmt = |v: &[f64]| v.iter().map(|r| format!("{r:.2}")).collect::<Vec<_>>().join(", ");
    println!(
        "limits: random 8-byte CAS per GPU alone [{}] G/s, all {} at once [{}] G/s (8 GiB each, median of 3)",
        fmt(&alone),
        gpus.len(),
        fmt(&together)
    );
    Ok(())
}
