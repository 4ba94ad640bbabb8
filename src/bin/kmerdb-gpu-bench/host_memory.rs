//! `--host-memory`: the rates at which host memory becomes usable for the GPU's copies, which set
//! how soon a GPU build's first pass can download its shards: pinning (`cuMemHostAlloc`, on one
//! thread and on two at once in one context), faulting pageable memory in on one thread and on
//! many, pinning memory already faulted in (`cuMemHostRegister`), and device-to-host copies into
//! pinned, faulted pageable and fresh pageable memory. 1 GiB each, medians of 3.

use cudarc::driver::sys;
use kmerdb::gpu::Gpu;
use rayon::prelude::*;
use std::time::Instant;

const BYTES: usize = 1 << 30;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn rate(t: Instant) -> f64 {
    BYTES as f64 / t.elapsed().as_secs_f64() / 1e9
}

/// Pins `BYTES` with `cuMemHostAlloc` and frees them: GB/s of the allocation.
fn pin_once(gpu: &Gpu) -> Result<f64, Box<dyn std::error::Error>> {
    gpu.ctx.bind_to_thread()?;
    let t = Instant::now();
    // SAFETY: a plain allocation, freed below.
    let p = unsafe { cudarc::driver::result::malloc_host(BYTES, sys::CU_MEMHOSTALLOC_PORTABLE) }?;
    let r = rate(t);
    // SAFETY: allocated just above, freed once.
    unsafe { cudarc::driver::result::free_host(p) }?;
    Ok(r)
}

/// A fresh pageable buffer, faulted in by writing it from the current pool's threads.
fn faulted() -> Vec<u8> {
    // A large zeroed allocation is mapped, not touched (calloc): the writes fault it in.
    let mut v = vec![0u8; BYTES];
    v.par_chunks_mut(1 << 21).for_each(|c| c.fill(1));
    v
}

pub fn run(gpu: &Gpu) -> Result<(), Box<dyn std::error::Error>> {
    let s = &gpu.stream;
    let dev = s.alloc_zeros::<u8>(BYTES)?;
    let (mut pin, mut pin2, mut one, mut many, mut reg) = (vec![], vec![], vec![], vec![], vec![]);
    let (mut d2h_pinned, mut d2h_faulted, mut d2h_fresh) = (vec![], vec![], vec![]);
    let one_thread = rayon::ThreadPoolBuilder::new().num_threads(1).build()?;
    for _ in 0..3 {
        pin.push(pin_once(gpu)?);
        let t = Instant::now();
        let both = std::thread::scope(|sc| {
            let a = sc.spawn(|| pin_once(gpu).is_ok());
            let b = sc.spawn(|| pin_once(gpu).is_ok());
            a.join().unwrap() && b.join().unwrap()
        });
        assert!(both, "pinning on two threads");
        pin2.push(2.0 * rate(t));
        let t = Instant::now();
        let v = one_thread.install(faulted);
        one.push(rate(t));
        drop(v);
        let t = Instant::now();
        let mut v = faulted();
        many.push(rate(t));
        let t = Instant::now();
        // SAFETY: `v` is alive and unmoved until unregistered below.
        let r = unsafe { sys::cuMemHostRegister_v2(v.as_mut_ptr().cast(), BYTES, sys::CU_MEMHOSTREGISTER_PORTABLE) };
        r.result()?;
        reg.push(rate(t));
        // SAFETY: registered above.
        unsafe { sys::cuMemHostUnregister(v.as_mut_ptr().cast()) }.result()?;
        // Device to host.
        // SAFETY: written by the copy before it is read.
        let mut pinned = unsafe { gpu.ctx.alloc_pinned::<u8>(BYTES)? };
        let t = Instant::now();
        s.memcpy_dtoh(&dev, &mut pinned)?;
        s.synchronize()?;
        d2h_pinned.push(rate(t));
        let t = Instant::now();
        s.memcpy_dtoh(&dev, &mut v)?;
        s.synchronize()?;
        d2h_faulted.push(rate(t));
        let mut fresh = vec![0u8; BYTES]; // mapped, not yet faulted in
        let t = Instant::now();
        s.memcpy_dtoh(&dev, &mut fresh)?;
        s.synchronize()?;
        d2h_fresh.push(rate(t));
    }
    println!(
        "host memory: pinning {:.2} GB/s on one thread, {:.2} GB/s on two at once; faulting pageable memory in {:.2} GB/s on one thread, {:.2} GB/s on {}; pinning faulted memory (register) {:.2} GB/s",
        median(pin),
        median(pin2),
        median(one),
        median(many),
        rayon::current_num_threads(),
        median(reg)
    );
    println!(
        "device to host: {:.2} GB/s into pinned, {:.2} GB/s into faulted pageable, {:.2} GB/s into fresh pageable memory (1 GiB, medians of 3)",
        median(d2h_pinned),
        median(d2h_faulted),
        median(d2h_fresh)
    );
    Ok(())
}
