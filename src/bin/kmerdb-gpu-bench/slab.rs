//! The slab table's rates (`cuda/slab_hash.cuh`) for the workloads of the SlabHash paper
//! (Ashkiani et al. 2018, on a Tesla K40c with 288 GB/s: 512 M insertions/s in a bulk build and
//! 937 M queries/s): a bulk build, searches of present and absent keys, and concurrent mixes of
//! insertions, deletions and searches, each at several memory utilizations, as fractions of the
//! random-access limits measured in the same run (8-byte CAS for insertions and deletions, 128-byte
//! reads for searches: one slab is one such read).

use kmerdb::gpu::Gpu;
use kmerdb::gpu::slab::{DeviceOps, DeviceSlabTable, Warps};
use kmerdb::slab_hash::{SLAB_BLOCK_SLABS, SlabConfig, SlabOp};
use std::time::Instant;

/// Pairs of the bulk build (the paper's 2^22 scaled up: the H100 has 10x the K40c's memory rate).
const PAIRS: usize = 1 << 24;

/// Distinct keys, none the empty marker: an odd multiplier is a bijection of the u32s.
fn key(i: u64) -> u32 {
    let k = (i as u32).wrapping_mul(0x9e37_79b1);
    if k == u32::MAX { 0x7fff_ffff } else { k }
}

/// Operations per second (in M/s) of one batch: launch to finish.
fn timed(gpu: &Gpu, table: &mut DeviceSlabTable, batch: &mut DeviceOps) -> Result<f64, Box<dyn std::error::Error>> {
    gpu.stream.synchronize()?;
    let t = Instant::now();
    table.launch(batch, Warps::All)?;
    gpu.stream.synchronize()?;
    Ok(batch.len as f64 / t.elapsed().as_secs_f64() / 1e6)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// A fixed shuffle (xorshift), so every run times the same order.
fn shuffled<T>(mut v: Vec<T>, seed: u64) -> Vec<T> {
    let mut x = seed | 1;
    for i in (1..v.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.swap(i, (x % (i as u64 + 1)) as usize);
    }
    v
}

/// Runs the workloads at each load; `cas` and `reads` are the limits in G/s.
pub fn run(gpu: &Gpu, cas: f64, reads: f64) -> Result<(), Box<dyn std::error::Error>> {
    println!(
        "slab table: {PAIRS} distinct keys; limits in this run: random 8-byte CAS {:.0} M/s, random 128-byte reads {:.0} M/s",
        cas * 1e3,
        reads * 1e3
    );
    let inserts: Vec<SlabOp> = (0..PAIRS as u64).map(|i| SlabOp::Insert { key: key(i), value: i as u32 }).collect();
    let found: Vec<SlabOp> = shuffled((0..PAIRS as u64).map(|i| SlabOp::Search { key: key(i) }).collect(), 1);
    let absent: Vec<SlabOp> = (PAIRS as u64..2 * PAIRS as u64).map(|i| SlabOp::Search { key: key(i) }).collect();
    // The load: the bulk build's pairs per bucket, in slabs' worth (15 pairs); from 1/4 (most
    // buckets one slab, mostly empty) to 4 (lists of about 5 slabs, mostly full).
    for load in [0.25, 0.5, 1.0, 2.0, 4.0] {
        let mut config = SlabConfig::for_pairs(PAIRS as u64, load, 2.0);
        // Room for the mixes' insertions (PAIRS / 5 pairs in all), one slab each at worst.
        config.blocks += (PAIRS / 5).div_ceil(SLAB_BLOCK_SLABS) as u32;
        let mut build = Vec::new();
        let mut table = None;
        for _ in 0..3 {
            let mut t = DeviceSlabTable::new(gpu, config)?;
            let mut batch = DeviceOps::upload(gpu, &inserts)?;
            build.push(timed(gpu, &mut t, &mut batch)?);
            table = Some(t);
        }
        let mut table = table.expect("three runs");
        let status = table.status()?;
        let taken = table.pool_slabs_taken()?;
        let utilization = PAIRS as f64 * 8.0 / ((config.buckets as u64 + taken) as f64 * 128.0);
        let mut rates = Vec::new();
        for ops in [&found, &absent] {
            let mut batch = DeviceOps::upload(gpu, ops)?;
            rates.push(median((0..3).map(|_| timed(gpu, &mut table, &mut batch)).collect::<Result<_, _>>()?));
        }
        let build = median(build);
        println!(
            "slab table at memory utilization {:.0}% (load {load}: {} buckets, {:.2} slabs a bucket): bulk build {:.0} M/s ({:.0}% of the CAS limit), search found {:.0} M/s ({:.0}% of the read limit), search absent {:.0} M/s ({:.0}%), status {status:#x}",
            100.0 * utilization,
            config.buckets,
            (config.buckets as u64 + taken) as f64 / config.buckets as f64,
            build,
            100.0 * build / (cas * 1e3),
            rates[0],
            100.0 * rates[0] / (reads * 1e3),
            rates[1],
            100.0 * rates[1] / (reads * 1e3)
        );
        // Concurrent mixes: a share of updates (half insertions of new pairs, half deletions of
        // pairs present), the rest searches of present keys, shuffled together.
        let mut next_new = 2 * PAIRS as u64;
        let mut next_delete = 0u64;
        let mut mixes = Vec::new();
        for updates in [0.1, 0.5, 1.0] {
            let n = PAIRS / 4;
            let half = (n as f64 * updates / 2.0) as u64;
            let mut ops: Vec<SlabOp> =
                (next_new..next_new + half).map(|i| SlabOp::Insert { key: key(i), value: 1 }).collect();
            ops.extend((next_delete..next_delete + half).map(|i| SlabOp::Delete { key: key(i), value: i as u32 }));
            ops.extend((0..n as u64 - 2 * half).map(|i| SlabOp::Search { key: key((i * 7) % PAIRS as u64) }));
            next_new += half;
            next_delete += half;
            let mut batch = DeviceOps::upload(gpu, &shuffled(ops, 2))?;
            let rate = timed(gpu, &mut table, &mut batch)?;
            mixes.push(format!("{:.0}% updates {rate:.0} M/s", 100.0 * updates));
        }
        println!("  concurrent mixes at that load: {}; status {:#x}", mixes.join(", "), table.status()?);
    }
    println!("(SlabHash paper, Tesla K40c, 288 GB/s: bulk build 512 M/s, search 937 M/s)");
    Ok(())
}
