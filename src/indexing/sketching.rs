//! Stage 1 of the CPU build: read reference sequences and sketch their windows into per-shard
//! bins of (feature, target, window) triples.
//!
//! Files are read in parallel, each one batch after batch, and large plain FASTA files in pieces
//! of whole records, several threads to a file (`input::fasta_chunks`); while one batch is
//! sketched the next is read (`rayon::join`), and long sequences are split into chunks of windows
//! sketched in parallel.
//! Targets get provisional ids in the order they happen to be read; `targets` renumbers them, so
//! nothing here needs to be ordered.

use crate::indexing::error::BuildError;
use crate::input::{Format, SeqReader, Source};
use crate::sketch::{Feature, Pending, SketchParams, Sketcher};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// Windows sketched as one task: about 230 kbp with the default stride.
const CHUNK_WINDOWS: u64 = 2048;
/// Bases read from one file before its batch is handed to the sketchers.
const BATCH_BASES: usize = 8 << 20;

/// A feature at a window, numbered globally: each target, as it is read, reserves the next
/// `windows` numbers ([`RawTarget::first_window`]). 8 bytes a location, the bins' whole cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Pair {
    pub feature: Feature,
    pub window: u32,
}

/// A sequence as read, before targets are ordered and given taxa.
#[derive(Debug, Clone)]
pub struct RawTarget {
    pub name: String,
    pub header: String,
    pub length: u64,
    pub windows: u64,
    /// Global number of the target's first window (see `Pair`); increasing with the provisional id.
    pub first_window: u64,
    /// Index into the build's sources, and the record's number in that source (from 1).
    pub source: usize,
    pub record: u64,
    /// Whether it holds a k-mer of valid bases, so gives the index features (`sketch::has_kmer`).
    pub has_kmer: bool,
}

/// Pairs of one shard, in chunks of [`BIN_CHUNK`] so that growing never copies or over-allocates
/// (a doubling `Vec` would hold up to twice the pairs' memory).
pub(crate) type Bin = Vec<Vec<Pair>>;
/// Pairs per bin chunk (768 KiB).
pub(crate) const BIN_CHUNK: usize = 1 << 16;

/// Everything stage 1 produces.
pub(crate) struct Sketched {
    pub bins: Vec<Bin>,
    pub targets: Vec<RawTarget>,
}

/// Progress shared with the progress bar, and where the reading threads' time went.
#[derive(Default)]
pub(crate) struct Progress {
    pub bases: AtomicU64,
    pub file_bytes_done: AtomicU64,
    /// Nanoseconds the reading threads spent parsing, and handing batches to the sketchers (the
    /// CPU's or a GPU's), summed over threads (the two overlap).
    pub parse_nanos: AtomicU64,
    pub sink_nanos: AtomicU64,
}

/// Where batches of read sequences go: sketched into bins on the CPU, or sent to a GPU.
pub(crate) type Sink<'a> = dyn Fn(&[Pending]) -> Result<(), BuildError> + Sync + 'a;

/// Reads every source, giving each record a provisional target id and handing batches of about
/// `batch_bases` bases to `sink` (from several threads at once). Returns the targets.
pub(crate) fn read_sources(
    sources: &[Source],
    params: &SketchParams,
    batch_bases: usize,
    progress: &Progress,
    sink: &Sink,
) -> Result<Vec<RawTarget>, BuildError> {
    let targets = Mutex::new(Vec::new());
    let ctx = Context { params, batch_bases, targets: &targets, progress, sink };
    use rayon::prelude::*;
    // Each source whole, or, for a large plain FASTA file, its pieces.
    let mut pieces: Vec<(usize, Option<crate::input::Chunk>)> = Vec::new();
    for (i, source) in sources.iter().enumerate() {
        match source {
            Source::File(path) => match crate::input::fasta_chunks(path)? {
                Some(chunks) => pieces.extend(chunks.into_iter().map(|c| (i, Some(c)))),
                None => pieces.push((i, None)),
            },
            Source::Stdin => pieces.push((i, None)),
        }
    }
    pieces.par_iter().try_for_each(|(i, chunk)| ctx.read_source(*i, &sources[*i], chunk.as_ref()))?;
    Ok(targets.into_inner().expect("no reader panicked"))
}

/// Stage 1 on the CPU: reads and sketches every source into per-shard bins.
pub(crate) fn sketch_sources(
    sources: &[Source],
    params: &SketchParams,
    shard_bits: u32,
    progress: &Progress,
) -> Result<Sketched, BuildError> {
    let bins: Vec<Mutex<Bin>> = (0..1usize << shard_bits).map(|_| Mutex::new(Vec::new())).collect();
    let sketcher = CpuSketcher { params, shard_bits, bins: &bins };
    let targets = read_sources(sources, params, BATCH_BASES, progress, &|batch| {
        if let Some(last) = batch.last() {
            if last.first_window + params.window_count(last.seq.len()) > 1 << 32 {
                return Err(BuildError::TooManyWindows);
            }
        }
        sketcher.sketch_batch(batch);
        Ok(())
    })?;
    Ok(Sketched { bins: bins.into_iter().map(|b| b.into_inner().expect("no sketcher panicked")).collect(), targets })
}

struct Context<'a> {
    params: &'a SketchParams,
    batch_bases: usize,
    targets: &'a Mutex<Vec<RawTarget>>,
    progress: &'a Progress,
    sink: &'a Sink<'a>,
}

impl Context<'_> {
    /// Reads a source whole, or one `chunk` of it.
    fn read_source(
        &self,
        index: usize,
        source: &Source,
        chunk: Option<&crate::input::Chunk>,
    ) -> Result<(), BuildError> {
        let mut reader = match chunk {
            Some(c) => SeqReader::open_chunk(source, c)?,
            None => SeqReader::open(source)?,
        };
        let timed = |nanos: &AtomicU64, f: &mut dyn FnMut() -> Result<(), BuildError>| {
            let t = std::time::Instant::now();
            let r = f();
            nanos.fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
            r
        };
        let mut batch = Vec::new();
        timed(&self.progress.parse_nanos, &mut || {
            batch = self.read_batch(index, &mut reader)?;
            Ok(())
        })?;
        while !batch.is_empty() {
            let mut next = Vec::new();
            let (read, done) = rayon::join(
                || {
                    timed(&self.progress.parse_nanos, &mut || {
                        next = self.read_batch(index, &mut reader)?;
                        Ok(())
                    })
                },
                || timed(&self.progress.sink_nanos, &mut || (self.sink)(&batch)),
            );
            done?;
            read?;
            batch = next;
        }
        if reader.records() == 0 {
            return Err(crate::input::InputError::Empty { file: source.clone() }.into());
        }
        let bytes = match (chunk, source) {
            (Some(c), _) => c.len(),
            (None, Source::File(p)) => std::fs::metadata(p).map(|m| m.len()).unwrap_or(0),
            (None, Source::Stdin) => 0,
        };
        self.progress.file_bytes_done.fetch_add(bytes, Ordering::Relaxed);
        Ok(())
    }

    fn read_batch(&self, index: usize, reader: &mut SeqReader) -> Result<Vec<Pending>, BuildError> {
        let mut batch = Vec::new();
        let mut bases = 0;
        while bases < self.batch_bases {
            let Some(rec) = reader.next_record() else {
                break;
            };
            let rec = rec?;
            if rec.format == Format::Fastq {
                return Err(reader
                    .wrong_format(Format::Fastq, Format::Fasta, " (kmerdb build indexes reference genomes in FASTA)")
                    .into());
            }
            let seq = rec.seq().into_owned();
            let name = String::from_utf8_lossy(rec.id()).into_owned();
            let header = String::from_utf8_lossy(rec.header()).into_owned();
            let windows = self.params.window_count(seq.len());
            let (target, first_window) = {
                let mut targets = self.targets.lock().expect("no sketcher panicked");
                let first_window = targets.last().map_or(0, |t: &RawTarget| t.first_window + t.windows);
                targets.push(RawTarget {
                    name,
                    header,
                    length: seq.len() as u64,
                    windows,
                    first_window,
                    source: index,
                    record: reader.records(),
                    has_kmer: crate::sketch::has_kmer(&seq, self.params.k as usize),
                });
                (u32::try_from(targets.len() - 1).map_err(|_| BuildError::TooManyTargets)?, first_window)
            };
            bases += seq.len();
            self.progress.bases.fetch_add(seq.len() as u64, Ordering::Relaxed);
            batch.push(Pending { target, first_window, seq });
        }
        Ok(batch)
    }
}

/// The CPU sink: sketches batches into shard bins.
struct CpuSketcher<'a> {
    params: &'a SketchParams,
    shard_bits: u32,
    bins: &'a [Mutex<Bin>],
}

impl CpuSketcher<'_> {
    fn sketch_batch(&self, batch: &[Pending]) {
        use rayon::prelude::*;
        let chunks: Vec<(&Pending, u64)> = batch
            .iter()
            .flat_map(|p| {
                let n = self.params.window_count(p.seq.len());
                (0..n.div_ceil(CHUNK_WINDOWS)).map(move |c| (p, c * CHUNK_WINDOWS))
            })
            .collect();
        chunks.par_iter().for_each_init(
            || (Sketcher::new(*self.params), Vec::new()),
            |(sketcher, pairs), &(p, first)| {
                pairs.clear();
                sketcher.sketch_windows(&p.seq, first..first + CHUNK_WINDOWS, |w, sketch| {
                    let window = (p.first_window + w) as u32;
                    pairs.extend(sketch.iter().map(|&feature| Pair { feature, window }));
                });
                self.deposit(pairs);
            },
        );
    }

    /// Moves a chunk's pairs into the shard bins, taking each shard's lock once.
    fn deposit(&self, pairs: &mut [Pair]) {
        let shard = |p: &Pair| crate::index::format::shard_of(p.feature, self.shard_bits);
        pairs.sort_unstable_by_key(shard);
        for run in pairs.chunk_by(|a, b| shard(a) == shard(b)) {
            let mut bin = self.bins[shard(&run[0])].lock().expect("no sketcher panicked");
            let mut run = run;
            while !run.is_empty() {
                if bin.last().is_none_or(|c| c.len() == BIN_CHUNK) {
                    bin.push(Vec::with_capacity(BIN_CHUNK));
                }
                let chunk = bin.last_mut().expect("a chunk was just ensured");
                let take = (BIN_CHUNK - chunk.len()).min(run.len());
                chunk.extend_from_slice(&run[..take]);
                run = &run[take..];
            }
        }
    }
}
