//! Scaling over several GPUs, device side, as in the seed papers' figures (multi-GPU HashGraph,
//! WarpCore's distributed mode): the data already in memory, each phase timed on its own with
//! every GPU finished before the next phase starts, so the split is exact (the build itself
//! overlaps the phases; its end-to-end times are in `main.rs`).
//!
//! - Build: synthetic genomes on the GPUs (dealt round-robin), then partition (`sketch_split`),
//!   exchange (every pair of GPUs copying at once, one stream per pair), insert (each owner its
//!   pairs) and condense (each GPU its shards, into host memory).
//! - Classify: the index spread over the GPUs, simulated pairs in host memory; `classify_on`
//!   (each GPU a share of every batch), timed by stage: upload (packing and copying), lookup
//!   (the kernels) and download.
//! - Peer bandwidth in the same run: one pair of GPUs, every pair at once, and a copy within one
//!   GPU for reference.
//!
//! Weak scaling keeps the work per GPU fixed (efficiency T1 / Tn); strong scaling keeps the total
//! fixed (efficiency T1 / (n Tn)).

use kmerdb::build::sketching::Pending;
use kmerdb::gpu::Gpu;
use kmerdb::gpu::build::DeviceBatch;
use kmerdb::gpu::multi::{Partition, condense_owned, enable_peer_access, partition, queue_pairs_copy, queue_peer_copy};
use kmerdb::gpu::table::{BucketListTable, TableConfig, ptr};
use kmerdb::index::LocationLayout;
use kmerdb::sketch::SketchParams;
use std::time::{Duration, Instant};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// The time of each build phase, and what the phases handled.
#[derive(Debug, Clone, Copy, Default)]
pub struct BuildPhases {
    pub partition: Duration,
    pub exchange: Duration,
    pub insert: Duration,
    pub condense: Duration,
    pub pairs: u64,
    pub exchanged_bytes: u64,
    /// Features and locations in the condensed shards (equal for equal inputs, whatever the GPUs).
    pub features: u64,
    pub locations: u64,
}

impl BuildPhases {
    fn total(&self) -> Duration {
        self.partition + self.exchange + self.insert + self.condense
    }
}

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

/// One build of `genomes` on `gpus`, phase by phase.
pub fn build_phases(gpus: &[&Gpu], genomes: &[Vec<u8>], params: &SketchParams) -> Result<BuildPhases> {
    const BATCH: usize = 64 << 20;
    let n = gpus.len();
    let shard_bits = kmerdb::index::format::DEFAULT_SHARD_BITS;
    // Each GPU's genomes, in batches, uploaded (not timed).
    let batches: Vec<Vec<DeviceBatch>> = (0..n)
        .map(|d| {
            let mut out = Vec::new();
            let mut batch: Vec<Pending> = Vec::new();
            let mut bases = 0;
            for (t, g) in genomes.iter().enumerate().filter(|(t, _)| t % n == d) {
                if bases + g.len() > BATCH && !batch.is_empty() {
                    out.push(DeviceBatch::upload(gpus[d], &batch, params)?);
                    (batch, bases) = (Vec::new(), 0);
                }
                bases += g.len();
                batch.push(Pending { target: t as u32, first_window: 0, seq: g.clone() });
            }
            if !batch.is_empty() {
                out.push(DeviceBatch::upload(gpus[d], &batch, params)?);
            }
            gpus[d].stream.synchronize()?;
            Ok(out)
        })
        .collect::<Result<_>>()?;
    let mut partitions: Vec<Vec<Partition>> = (0..n)
        .map(|d| {
            let s = &gpus[d].stream;
            let p = batches[d]
                .iter()
                .map(|b| Partition::new(s, b.windows, params.sketch_size, n))
                .collect::<std::result::Result<Vec<_>, _>>()?;
            s.synchronize()?;
            Ok(p)
        })
        .collect::<Result<_>>()?;
    let mut t = BuildPhases::default();

    // Partition: every GPU its batches.
    let slots: Vec<std::sync::Mutex<&mut Vec<Partition>>> = partitions.iter_mut().map(std::sync::Mutex::new).collect();
    let (counts, time) = on_each(n, |d| {
        let mut parts = slots[d].lock().expect("one thread per GPU");
        let mut counts = Vec::new();
        for (b, p) in batches[d].iter().zip(parts.iter_mut()) {
            counts.push(partition(gpus[d], &gpus[d].stream, b, params, shard_bits, n, p)?);
        }
        Ok(counts)
    })?;
    drop(slots);
    t.partition = time;
    // counts[g][batch][d]: pairs GPU g sends to GPU d.
    let incoming = |d: usize, remote: bool| -> u64 {
        (0..n).filter(|&g| (g != d) == remote).flat_map(|g| counts[g].iter().map(move |c| c[d] as u64)).sum()
    };
    t.pairs = (0..n).map(|d| incoming(d, true) + incoming(d, false)).sum();

    // Tables and receive buffers (not timed).
    let mut tables = Vec::new();
    let mut recv = Vec::new();
    // streams[d][g]: GPU d's stream for the copies from GPU g.
    let mut streams = Vec::new();
    for g in gpus {
        streams.push(gpus.iter().map(|_| g.ctx.new_stream()).collect::<std::result::Result<Vec<_>, _>>()?);
    }
    for (d, g) in gpus.iter().enumerate() {
        let values = incoming(d, true) + incoming(d, false);
        let v = values * 11 / 10 + (1 << 20);
        tables.push(BucketListTable::new(g, TableConfig::new(v * 3 / 4, (2 * v).min(u32::MAX as u64)))?);
        let r = incoming(d, true).max(1) as usize;
        recv.push((g.stream.alloc_zeros::<u32>(r)?, g.stream.alloc_zeros::<u64>(r)?));
        g.stream.synchronize()?;
    }

    // Exchange: every owner pulls from every other GPU at once (a stream per pair).
    let start = Instant::now();
    for d in 0..n {
        let (owner, mut at) = (gpus[d], 0u64);
        let (rk, rv) = (ptr(owner, &recv[d].0), ptr(owner, &recv[d].1));
        for g in (0..n).filter(|&g| g != d) {
            for (b, c) in counts[g].iter().enumerate() {
                let (k, v) = partitions[g][b].stretch(gpus[g], d);
                let c = c[d] as u64;
                let s = &streams[d][g];
                queue_pairs_copy(owner, (rk + at * 4, rv + at * 8), gpus[g], (k, v), c, s)?;
                at += c;
            }
        }
    }
    for s in streams.iter().flatten() {
        s.synchronize()?;
    }
    t.exchange = start.elapsed();
    t.exchanged_bytes = (0..n).map(|d| incoming(d, true) * 12).sum();

    // Insert: each owner its received pairs and its own stretches, each GPU from its own thread.
    let start = Instant::now();
    on_each(n, |d| {
        let owner = gpus[d];
        tables[d].queue_insert(ptr(owner, &recv[d].0), ptr(owner, &recv[d].1), incoming(d, true))?;
        for (b, c) in counts[d].iter().enumerate() {
            let (k, v) = partitions[d][b].stretch(owner, d);
            tables[d].queue_insert(k, v, c[d] as u64)?;
        }
        let status = tables[d].status()?;
        if status.is_error() {
            return Err(format!("GPU {d}: table full: {}", status.describe()).into());
        }
        Ok(())
    })?;
    t.insert = start.elapsed();
    drop((recv, partitions, batches));

    // Condense: every GPU its shards, at once.
    let final_id: Vec<Option<u32>> = (0..genomes.len() as u32).map(Some).collect();
    let max_windows = genomes.iter().map(|g| params.window_count(g.len())).max().unwrap_or(1);
    let layout = LocationLayout::for_counts(genomes.len() as u64, max_windows, 254);
    let (stats, time) = on_each(n, |d| {
        let shards = condense_owned(&tables[d], gpus[d], d, n, &final_id, &layout, 254, shard_bits)?;
        Ok(shards.iter().fold((0u64, 0u64), |(f, l), (_, st)| (f + st.features, l + st.locations)))
    })?;
    t.condense = time;
    (t.features, t.locations) = stats.iter().fold((0, 0), |(f, l), s| (f + s.0, l + s.1));
    Ok(t)
}

fn efficiency(t1: Duration, tn: Duration, n: usize, weak: bool) -> f64 {
    let e = t1.as_secs_f64() / tn.as_secs_f64();
    100.0 * if weak { e } else { e / n as f64 }
}

/// Weak and strong scaling of the build on the GPU counts `sets` (prefixes of `gpus`).
pub fn build_scaling(gpus: &[Gpu], sets: &[usize], gbp_per_gpu: f64, gbp_total: f64) -> Result<()> {
    let params = SketchParams::new(16, 127, None, 16, 0)?;
    let genome_len = 5_000_000usize;
    let most = sets.iter().max().copied().unwrap_or(1);
    let needed = (gbp_per_gpu * most as f64).max(gbp_total);
    let count = (needed * 1e9 / genome_len as f64).ceil() as usize;
    let t = Instant::now();
    let mut genomes = Vec::with_capacity(count);
    let spec =
        kmerdb::synth::SynthSpec { species: count.div_ceil(5), genome_len, strains: 5, divergence: 0.01, seed: 23 };
    kmerdb::synth::generate(&spec, |_, seq| {
        if genomes.len() < count {
            genomes.push(seq.to_vec());
        }
    });
    println!(
        "scaling, build: {:.2} Gbp of synthetic genomes (5 strains per species, 1% apart) made in {:.1} s",
        count as f64 * genome_len as f64 / 1e9,
        t.elapsed().as_secs_f64()
    );
    for (weak, gbp) in [(true, gbp_per_gpu), (false, gbp_total)] {
        let mut first: Option<BuildPhases> = None;
        for &n in sets {
            let refs: Vec<&Gpu> = gpus[..n].iter().collect();
            if n > 1 {
                enable_peer_access(&refs)?;
            }
            let take = ((if weak { gbp * n as f64 } else { gbp }) * 1e9 / genome_len as f64).ceil() as usize;
            // The median of three runs by total time.
            let mut runs =
                (0..3).map(|_| build_phases(&refs, &genomes[..take], &params)).collect::<Result<Vec<_>>>()?;
            runs.sort_by_key(|r| r.total());
            let r = runs[1];
            let base = *first.get_or_insert(r);
            let ms = |d: Duration| d.as_secs_f64() * 1e3;
            println!(
                "scaling, build {} on {n} GPU(s): {:.2} Gbp, {:.0} M pairs; partition {:.0} ms, exchange {:.0} ms ({:.2} GB, {:.0} GB/s), insert {:.0} ms, condense {:.0} ms; total {:.0} ms = {:.2} Gbp/s; efficiency {:.0}% (partition {:.0}%, insert {:.0}%, condense {:.0}%); {} features, {} locations",
                if weak { "weak" } else { "strong" },
                take as f64 * genome_len as f64 / 1e9,
                r.pairs as f64 / 1e6,
                ms(r.partition),
                ms(r.exchange),
                r.exchanged_bytes as f64 / 1e9,
                r.exchanged_bytes as f64 / 1e9 / r.exchange.as_secs_f64().max(1e-9),
                ms(r.insert),
                ms(r.condense),
                ms(r.total()),
                take as f64 * genome_len as f64 / 1e9 / r.total().as_secs_f64(),
                efficiency(base.total(), r.total(), n, weak),
                efficiency(base.partition, r.partition, n, weak),
                efficiency(base.insert, r.insert, n, weak),
                efficiency(base.condense, r.condense, n, weak),
                r.features,
                r.locations,
            );
        }
    }
    Ok(())
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
        queue_peer_copy(g0, ptr(g0, &dsts[0]), g0, ptr(g0, &bufs[0]), BYTES, &g0.stream)?;
        g0.stream.synchronize()?;
        Ok(())
    })?;
    print!("peer bandwidth: within GPU 0 {:.0} GB/s (read + write)", BYTES as f64 / within / 1e9);
    if n > 1 {
        let s = gpus[1].ctx.new_stream()?;
        let pair = timed(&|| {
            queue_peer_copy(&gpus[1], ptr(&gpus[1], &dsts[1]), g0, ptr(g0, &bufs[0]), BYTES, &s)?;
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
                    let at = (k * chunk) as u64;
                    queue_peer_copy(
                        dst,
                        ptr(dst, &dsts[d]) + at,
                        src,
                        ptr(src, &bufs[g]) + at,
                        chunk,
                        &streams[d * n + g],
                    )?;
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
    use kmerdb::gpu::classify::{GpuClassifier, classify_on};
    let classifiers = GpuClassifier::on_gpus(gpus, index, 2, 600)?;
    let batches: Vec<&[(Vec<u8>, Vec<u8>)]> = pairs.chunks(batch * gpus.len()).collect();
    let run = |chunk: &[(Vec<u8>, Vec<u8>)]| -> Result<()> {
        let mates: Vec<[&[u8]; 2]> = chunk.iter().map(|(a, b)| [a.as_slice(), b.as_slice()]).collect();
        let reads: Vec<&[&[u8]]> = mates.iter().map(|m| m.as_slice()).collect();
        classify_on(&classifiers, &reads, true)?.recycle(&classifiers);
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
