//! `--write-rates DIR`: how fast one file on DIR's disk takes a build's shards (200 MiB pieces,
//! `--write-gib` GiB in all), written as the index writer could: `pwrite` from one thread and from
//! several, with and without asking for writeback after each piece (`sync_file_range`), and copied
//! into a mapping of preallocated space from several threads; each followed by the `fsync` a build
//! ends with. Needs no GPU. (Session 13 measured it to choose the writer's shape: buffered writes
//! into one file do not scale with threads, and asking for writeback on the writing thread halves
//! its rate; `bench/results/HISTORY.md`.)

use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::time::Instant;

const PIECE: usize = 200 << 20;

type Write<'a> = &'a (dyn Fn(&std::fs::File, usize, &[u8]) -> std::io::Result<()> + Sync);

fn start_writeback(f: &std::fs::File, at: usize, len: usize) {
    // SAFETY: a system call on an open descriptor; a hint, its result ignored.
    unsafe { libc::sync_file_range(f.as_raw_fd(), at as i64, len as i64, libc::SYNC_FILE_RANGE_WRITE) };
}

fn mapped_copy(f: &std::fs::File, at: usize, src: &[u8]) -> std::io::Result<()> {
    // SAFETY: a system call on an open descriptor, for a range of its own.
    if unsafe { libc::fallocate(f.as_raw_fd(), 0, at as i64, src.len() as i64) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the file's range was just allocated; only this thread maps or writes it.
    let mut m = unsafe { memmap2::MmapOptions::new().offset(at as u64).len(src.len()).map_mut(f)? };
    m.copy_from_slice(src);
    start_writeback(f, at, src.len());
    Ok(())
}

pub fn run(dir: &std::path::Path, gib: usize) -> Result<(), Box<dyn std::error::Error>> {
    let pieces = (gib << 30) / PIECE;
    let src: Vec<u8> = (0..PIECE).map(|i| (i * 7 + i / 4096) as u8).collect();
    let path = dir.join("kmerdb-write-rates.bin");
    let run = |name: &str, threads: usize, write: Write<'_>| -> Result<(), Box<dyn std::error::Error>> {
        let _ = std::fs::remove_file(&path);
        let f = std::fs::OpenOptions::new().create(true).truncate(true).read(true).write(true).open(&path)?;
        let t = Instant::now();
        std::thread::scope(|s| -> std::io::Result<()> {
            let handles: Vec<_> = (0..threads)
                .map(|th| {
                    let (f, src) = (&f, &src);
                    s.spawn(move || (th..pieces).step_by(threads).try_for_each(|p| write(f, p * PIECE, src)))
                })
                .collect();
            handles.into_iter().try_for_each(|h| h.join().expect("a writer does not panic"))
        })?;
        let w = t.elapsed().as_secs_f64();
        let t = Instant::now();
        f.sync_all()?;
        let synced = t.elapsed().as_secs_f64();
        let bytes = (pieces * PIECE) as f64;
        println!(
            "write rates: {name:>30} x{threads}: {:.2} GB/s into the page cache ({w:.2} s), fsync {synced:.2} s, {:.2} GB/s in all",
            bytes / w / 1e9,
            bytes / (w + synced) / 1e9
        );
        drop(f);
        std::fs::remove_file(&path)?;
        Ok(())
    };
    let pwrite: Write<'_> = &|f, at, src| f.write_all_at(src, at as u64);
    let pwrite_writeback: Write<'_> = &|f, at, src| {
        f.write_all_at(src, at as u64)?;
        start_writeback(f, at, src.len());
        Ok(())
    };
    run("pwrite (warm-up)", 1, pwrite)?;
    for threads in [1, 2, 4] {
        run("pwrite", threads, pwrite)?;
    }
    for threads in [1, 4] {
        run("pwrite + sync_file_range", threads, pwrite_writeback)?;
    }
    for threads in [4, 8] {
        run("fallocate + mapped copy", threads, &mapped_copy)?;
    }
    Ok(())
}
