//! Decompression rates of the decoders kmerdb could use (issue 13); run by `bench/decompress.sh`.
//!
//!     kmerdb-decompress-bench [--runs N] DECODER THREADS FILE
//!
//! prints one tab-separated line: decoder, threads, file, compressed bytes, output bytes, the
//! output's CRC32 (from a first, untimed run, so that decoders can be checked against each
//! other), the median wall seconds of N runs, the rates in GB/s of output and of input over that
//! time, and the CPU seconds (user + system, all threads) of the median run with the output rate
//! per CPU second (the per-core rate, which other load on the machine disturbs less). The file is
//! read into memory first.
//!
//! Decoders:
//! - `kmerdb`: `input::decompress::open` (any format; THREADS threads where it decodes in parallel)
//! - `flate2`: flate2's `MultiGzDecoder`, streaming, with kmerdb's backend (zlib-rs), one thread
//! - `zstd`: the zstd crate's streaming decoder, one thread
//! - `libdeflate-blocks`, `zlib-rs-blocks`, `miniz-blocks`, `zune-blocks`: every block of a BGZF
//!   file inflated whole by that library, one thread (the per-core comparison on equal terms)
//! - `libdeflate-whole`, `miniz-whole`, `zune-whole`: a single-member gzip file inflated whole
//!   into one buffer (not streaming: memory for all of the output), one thread

use std::io::Read;
use std::time::Instant;

use kmerdb::input::{Source, decompress};

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut runs = 3;
    if args.first().map(String::as_str) == Some("--runs") {
        runs = args[1].parse().expect("--runs N");
        args.drain(..2);
    }
    let [decoder, threads, file] = &args[..] else {
        eprintln!("usage: kmerdb-decompress-bench [--runs N] DECODER THREADS FILE");
        std::process::exit(2);
    };
    let threads: usize = threads.parse().expect("THREADS");
    let input = std::fs::read(file).expect("cannot read the file");
    let (out, crc) = run(decoder, threads, file, &input, true);
    let mut times = Vec::new();
    for _ in 0..runs {
        let (t, cpu) = (Instant::now(), cpu_seconds());
        let (n, _) = run(decoder, threads, file, &input, false);
        assert_eq!(n, out, "runs disagree");
        times.push((t.elapsed().as_secs_f64(), cpu_seconds() - cpu));
    }
    times.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (s, cpu) = times[times.len() / 2];
    println!(
        "{decoder}\t{threads}\t{file}\t{}\t{out}\t{crc:08x}\t{s:.3}\t{:.3}\t{:.3}\t{cpu:.3}\t{:.3}",
        input.len(),
        out as f64 / s / 1e9,
        input.len() as f64 / s / 1e9,
        out as f64 / cpu / 1e9
    );
}

/// CPU time of the process so far (user + system, all threads).
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 * 1e-6;
    t(u.ru_utime) + t(u.ru_stime)
}

/// Decodes once: the output's length, and with `hash` its CRC32 (0 without).
fn run(decoder: &str, threads: usize, file: &str, input: &[u8], hash: bool) -> (u64, u32) {
    match decoder {
        // kmerdb reads the file itself (mapping it for pigz -i); the others get it in memory.
        "kmerdb" => {
            let source = Source::File(file.into());
            let d = decompress::open(&source, &decompress::pool_of(threads)).unwrap_or_else(|e| panic!("{e}"));
            drain(d.reader, hash)
        }
        "flate2" => {
            let r = flate2::read::MultiGzDecoder::new(std::io::BufReader::with_capacity(256 << 10, input));
            drain(Box::new(r), hash)
        }
        "zstd" => drain(Box::new(zstd::stream::read::Decoder::new(input).unwrap()), hash),
        _ if decoder.ends_with("-blocks") => blocks(&decoder[..decoder.len() - 7], input, hash),
        _ if decoder.ends_with("-whole") => whole(&decoder[..decoder.len() - 6], input, hash),
        _ => panic!("unknown decoder {decoder}"),
    }
}

fn drain(mut r: Box<dyn Read + Send + '_>, hash: bool) -> (u64, u32) {
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    let mut crc = crc32fast::Hasher::new();
    loop {
        let n = r.read(&mut buf).unwrap_or_else(|e| panic!("{e}"));
        if n == 0 {
            return (total, if hash { crc.finalize() } else { 0 });
        }
        if hash {
            crc.update(&buf[..n]);
        }
        total += n as u64;
    }
}

/// The length of a gzip header (FEXTRA, FNAME, FCOMMENT, FHCRC).
fn header_len(b: &[u8]) -> usize {
    assert_eq!(b[..3], [0x1f, 0x8b, 8], "not gzip");
    let flags = b[3];
    let mut pos = 10;
    if flags & 4 != 0 {
        pos += 2 + u16::from_le_bytes([b[10], b[11]]) as usize;
    }
    for f in [8, 16] {
        if flags & f != 0 {
            pos += b[pos..].iter().position(|&c| c == 0).unwrap() + 1;
        }
    }
    if flags & 2 != 0 {
        pos += 2;
    }
    pos
}

/// Inflates one raw deflate stream into `out` (sized exactly) with the named library.
struct Inflaters {
    libdeflate: *mut libdeflate_sys::libdeflate_decompressor,
    zlib: flate2::Decompress,
}

impl Inflaters {
    fn inflate(&mut self, lib: &str, data: &[u8], out: &mut [u8]) {
        let n = match lib {
            "libdeflate" => {
                let mut n = 0;
                // SAFETY: valid slices; libdeflate writes at most out.len() bytes.
                let r = unsafe {
                    libdeflate_sys::libdeflate_deflate_decompress(
                        self.libdeflate,
                        data.as_ptr().cast(),
                        data.len(),
                        out.as_mut_ptr().cast(),
                        out.len(),
                        &mut n,
                    )
                };
                assert_eq!(r, 0, "libdeflate failed");
                n
            }
            "zlib-rs" => {
                self.zlib.reset(false);
                self.zlib.decompress(data, out, flate2::FlushDecompress::Finish).expect("zlib-rs failed");
                self.zlib.total_out() as usize
            }
            "miniz" => miniz_oxide::inflate::decompress_slice_iter_to_slice(out, std::iter::once(data), false, true)
                .expect("miniz_oxide failed"),
            "zune" => {
                let opts = zune_inflate::DeflateOptions::default().set_size_hint(out.len()).set_limit(out.len());
                let v =
                    zune_inflate::DeflateDecoder::new_with_options(data, opts).decode_deflate().expect("zune failed");
                out[..v.len()].copy_from_slice(&v);
                v.len()
            }
            _ => panic!("unknown library {lib}"),
        };
        assert_eq!(n, out.len(), "{lib}: wrong size");
    }
}

fn inflaters() -> Inflaters {
    // SAFETY: allocation only.
    let libdeflate = unsafe { libdeflate_sys::libdeflate_alloc_decompressor() };
    Inflaters { libdeflate, zlib: flate2::Decompress::new(false) }
}

fn le32(b: &[u8]) -> u32 {
    u32::from_le_bytes(b[..4].try_into().unwrap())
}

/// Every BGZF block inflated in turn (one thread), into one reused 64 KiB buffer, each block's
/// CRC32 checked (as any gzip decoder must).
fn blocks(lib: &str, input: &[u8], hash: bool) -> (u64, u32) {
    let mut inf = inflaters();
    let mut out = vec![0u8; 1 << 16];
    let (mut total, mut crc, mut pos) = (0u64, crc32fast::Hasher::new(), 0);
    while pos < input.len() {
        let b = &input[pos..];
        let xlen = u16::from_le_bytes([b[10], b[11]]) as usize;
        assert!(b[3] & 4 != 0 && b[12] == b'B' && b[13] == b'C', "not BGZF at byte {pos}");
        let size = u16::from_le_bytes([b[16], b[17]]) as usize + 1;
        let block = &b[..size];
        let isize = le32(&block[size - 4..]) as usize;
        inf.inflate(lib, &block[12 + xlen..size - 8], &mut out[..isize]);
        assert_eq!(crc32fast::hash(&out[..isize]), le32(&block[size - 8..]), "CRC32 of the block at byte {pos}");
        if hash {
            crc.update(&out[..isize]);
        }
        total += isize as u64;
        pos += size;
    }
    (total, crc.finalize())
}

/// A single-member gzip file inflated whole (its size from the trailer: below 4 GiB only).
fn whole(lib: &str, input: &[u8], hash: bool) -> (u64, u32) {
    let isize = le32(&input[input.len() - 4..]) as usize;
    let mut out = vec![0u8; isize];
    let mut inf = inflaters();
    let h = header_len(input);
    inf.inflate(lib, &input[h..input.len() - 8], &mut out);
    let crc = crc32fast::hash(&out);
    assert_eq!(crc, le32(&input[input.len() - 8..]), "CRC32");
    (out.len() as u64, if hash { crc } else { 0 })
}
