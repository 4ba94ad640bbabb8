//! Fuzz targets: one function per parsing boundary, taking arbitrary bytes.
//!
//! Two harnesses run them: the cargo-fuzz crate in `fuzz/` (libFuzzer, one binary per target,
//! `cargo fuzz run TARGET`) and the stable smoke test `tests/fuzz_smoke.rs`, which runs every
//! target on its seed corpus (`fuzz/corpus/TARGET/`) and on deterministic mutations of it.
//!
//! The invariant every target checks: the input is accepted, or rejected with the stage's typed
//! error whose message names the file (or sheet) at fault; never a panic, never a read outside
//! the input. Targets whose stage reads files (the index is memory-mapped, compression and
//! formats are detected from the content) write the bytes to a fresh temporary directory first.
//! Many targets also check properties of what they accept; each function says which. A broken
//! property panics, so both harnesses report it like a crash.

use crate::classify::{Classifier, ClassifyParams, ReadLayout, ReadStream};
use crate::index::format::fix_checksums;
use crate::index::{Index, Verify};
use crate::input::{Format, SeqReader, Source, first_word};
use crate::taxonomy::{NcbiTaxonomy, ROOT, SeqIdMap, TaxId, TaxonTree, taxid_from_header};
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// What a target made of its input: accepted, or rejected with a typed error.
pub type Outcome = Result<(), Box<dyn std::error::Error>>;

/// A fuzz target.
pub(crate) type Target = fn(&[u8]) -> Outcome;

/// Every target by name (the names of the `fuzz/` binaries and corpus folders).
pub const TARGETS: &[(&str, Target)] = &[
    ("fastx", fastx),
    ("fastx_compressed", fastx_compressed),
    ("taxonomy_nodes", taxonomy_nodes),
    ("taxonomy_names", taxonomy_names),
    ("taxonomy_merged", taxonomy_merged),
    ("seqid_map", seqid_map),
    ("sample_sheet", sample_sheet),
    ("index_open", index_open),
    ("index_open_fixed", index_open_fixed),
    ("merge_candidates", merge_candidates),
    ("merge_candidates_fixed", merge_candidates_fixed),
];

/// A fresh temporary directory for one input.
fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("kmerdb-fuzz").tempdir().expect("create a temporary directory")
}

fn write_file(path: &Path, bytes: &[u8]) {
    std::fs::write(path, bytes).expect("write a temporary file");
}

/// A rejection, after checking that its message names `file`.
fn rejected(err: impl std::error::Error + 'static, file: &str) -> Box<dyn std::error::Error> {
    let message = err.to_string();
    assert!(message.contains(file), "an error that does not name {file}: {message}");
    Box::new(err)
}

// ---------------------------------------------------------------------------------------------
// FASTA and FASTQ through `input`

/// One record as read: header, sequence, quality.
type Record = (Vec<u8>, Vec<u8>, Option<Vec<u8>>);

/// Sketching parameters of the default index.
fn default_sketch() -> crate::sketch::SketchParams {
    crate::sketch::SketchParams::new(16, 127, None, 16, 0).expect("the defaults are valid")
}

/// FASTA or FASTQ, plain or compressed (detected from the content), read three ways: record by
/// record through [`SeqReader`] (also sketching each sequence and reading its header's taxid
/// tag, as a build does), as interleaved pairs and as the R1 and R2 of a pair through
/// [`ReadStream`], as classify does.
///
/// Checks: a record's id is the first word of its header; a FASTQ record's quality is as long as
/// its sequence and a FASTA record has none; sequences hold no line breaks; the file read as
/// both mates of pairs gives as many pairs as it has records.
pub fn fastx(data: &[u8]) -> Outcome {
    let dir = scratch();
    let path = dir.path().join("reads.fq");
    write_file(&path, data);
    read_fastx(&path).map(|_| ())
}

/// Reads `path` as [`fastx`] does; its records if it was accepted.
fn read_fastx(path: &Path) -> Result<Vec<Record>, Box<dyn std::error::Error>> {
    let name = path.file_name().and_then(|n| n.to_str()).expect("a plain file name");
    let source = Source::File(path.to_path_buf());
    let mut records = Vec::new();
    let mut reader = SeqReader::open(&source).map_err(|e| rejected(e, name))?;
    let mut sketcher = crate::sketch::Sketcher::new(default_sketch());
    let mut features = Vec::new();
    while let Some(record) = reader.next_record() {
        let record = record.map_err(|e| rejected(e, name))?;
        let (header, seq, qual) = (record.header(), record.seq(), record.qual());
        assert_eq!(record.id(), first_word(header), "the id is the header's first word");
        match record.format {
            Format::Fastq => {
                let qual = qual.expect("a FASTQ record has a quality line");
                assert_eq!(qual.len(), seq.len(), "quality and sequence differ in length");
            }
            Format::Fasta => assert!(qual.is_none(), "a FASTA record with a quality line"),
        }
        assert!(!seq.contains(&b'\n'), "a line break inside a sequence");
        let _ = taxid_from_header(&String::from_utf8_lossy(header));
        features.clear();
        sketcher.read_features(&seq, &mut features);
        assert!(features.iter().all(|&f| f != crate::sketch::NO_FEATURE));
        sketcher.sketch_all(&seq, |_, sketch| assert!(sketch.is_sorted()));
        records.push((header.to_vec(), seq.into_owned(), qual.map(<[u8]>::to_vec)));
    }
    let interleaved = read_all(ReadLayout::Interleaved(vec![source.clone()])).map_err(|e| rejected(e, name));
    if let Ok(pairs) = interleaved {
        assert_eq!(pairs, records.len() / 2, "interleaved pairs");
    }
    let pairs = read_all(ReadLayout::Paired(vec![(source.clone(), source)])).map_err(|e| rejected(e, name))?;
    assert_eq!(pairs, records.len(), "the file paired with itself");
    Ok(records)
}

/// Reads every read of `layout` in small batches; the number of reads.
fn read_all(layout: ReadLayout) -> Result<usize, crate::classify::reads::ReadError> {
    // Two threads, so that blocks are parsed by a thread other than the consumer too.
    static POOL: std::sync::OnceLock<std::sync::Arc<rayon::ThreadPool>> = std::sync::OnceLock::new();
    let pool = POOL.get_or_init(|| {
        std::sync::Arc::new(rayon::ThreadPoolBuilder::new().num_threads(2).build().expect("a thread pool"))
    });
    let mut stream = ReadStream::new(layout, pool.clone())?;
    let (mut batch, mut total) = (crate::classify::reads::Batch::default(), 0);
    loop {
        stream.next_batch(&mut batch, 7)?;
        if batch.is_empty() {
            return Ok(total);
        }
        total += batch.len();
    }
}

/// The compressions `input` detects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Codec {
    Gzip,
    Bzip2,
    Xz,
    Zstd,
}

impl Codec {
    pub(crate) const ALL: [Codec; 4] = [Codec::Gzip, Codec::Bzip2, Codec::Xz, Codec::Zstd];

    /// `text` compressed (fastest settings).
    pub(crate) fn compress(self, text: &[u8]) -> Vec<u8> {
        let out = Vec::with_capacity(text.len() / 2 + 64);
        let done = match self {
            Codec::Gzip => {
                let mut w = flate2::write::GzEncoder::new(out, flate2::Compression::fast());
                w.write_all(text).and_then(|()| w.finish())
            }
            Codec::Bzip2 => {
                let mut w = bzip2::write::BzEncoder::new(out, bzip2::Compression::fast());
                w.write_all(text).and_then(|()| w.finish())
            }
            Codec::Xz => {
                let mut w = liblzma::write::XzEncoder::new(out, 0);
                w.write_all(text).and_then(|()| w.finish())
            }
            Codec::Zstd => zstd::stream::encode_all(text, 1),
        };
        done.expect("compressing into memory cannot fail")
    }
}

/// FASTA or FASTQ through each compression: `data[0]` picks the codec, `data[1]` what happens to
/// the compressed stream (nothing, cut short at `data[2]`/256 of its length, or one byte flipped
/// at a position from `data[2..4]`), the rest is the text, compressed here.
///
/// Checks, besides those of [`fastx`]: an intact stream reads exactly like the plain text (the
/// same records, or both rejected); a stream cut short is rejected, never read as a shorter file.
pub fn fastx_compressed(data: &[u8]) -> Outcome {
    let [codec, damage, a, b, text @ ..] = data else { return Ok(()) };
    let codec = Codec::ALL[*codec as usize % Codec::ALL.len()];
    let mut bytes = codec.compress(text);
    let cut = match damage % 3 {
        0 => false,
        1 => {
            bytes.truncate(bytes.len() * *a as usize / 256);
            true
        }
        _ => {
            let at = u16::from_le_bytes([*a, *b]) as usize % bytes.len();
            bytes[at] ^= 1 << (b % 8);
            false
        }
    };
    let dir = scratch();
    let (plain, packed) = (dir.path().join("reads.fq"), dir.path().join("reads.fq.z"));
    write_file(&packed, &bytes);
    let got = read_fastx(&packed);
    if cut {
        assert!(got.is_err(), "{codec:?} stream cut to {} bytes was read as complete", bytes.len());
    } else if damage % 3 == 0 {
        write_file(&plain, text);
        match (read_fastx(&plain), &got) {
            (Ok(want), Ok(got)) => assert!(want == *got, "{codec:?} input reads differently from plain text"),
            (Err(_), Err(_)) => {}
            (want, got) => panic!("{codec:?}: plain text gives {want:?}, compressed {:?}", got.as_ref().map(|_| ())),
        }
    }
    got.map(|_| ())
}

// ---------------------------------------------------------------------------------------------
// NCBI taxonomy dumps and sequence → taxid maps

/// The bundled taxonomy (`data/taxonomy`), the partner of a fuzzed dump.
const NODES: &[u8] = include_bytes!("../data/taxonomy/nodes.dmp");
const NAMES: &[u8] = include_bytes!("../data/taxonomy/names.dmp");
/// Retired taxids of the bundled taxonomy's taxa (a chain, and one to an unknown taxid).
const MERGED: &[u8] = b"12\t|\t562\t|\n13\t|\t12\t|\n14\t|\t99999999\t|\n";

/// `data` as `nodes.dmp`, with the bundled `names.dmp` and a small `merged.dmp`; see `taxonomy` below.
pub fn taxonomy_nodes(data: &[u8]) -> Outcome {
    taxonomy(data, NAMES, MERGED, "nodes.dmp")
}

/// `data` as `names.dmp`, with the bundled `nodes.dmp`; see `taxonomy`.
pub fn taxonomy_names(data: &[u8]) -> Outcome {
    taxonomy(NODES, data, MERGED, "names.dmp")
}

/// `data` as `merged.dmp`, with the bundled `nodes.dmp` and `names.dmp`; see `taxonomy`.
pub fn taxonomy_merged(data: &[u8]) -> Outcome {
    taxonomy(NODES, NAMES, data, "merged.dmp")
}

/// Loads a taxonomy directory (each dump plain or gzip, detected from the content), whole and
/// without names followed by the names of chosen taxa, as a build does.
///
/// Checks on an accepted taxonomy, for every number in the fuzzed dump taken as a taxid: a known
/// taxon's lineage runs from the root to it through its parents; a resolved taxid is a current
/// taxon; the pruned lineages form a valid [`TaxonTree`]; names read later are the names read
/// whole.
fn taxonomy(nodes: &[u8], names: &[u8], merged: &[u8], fuzzed: &str) -> Outcome {
    let dir = scratch();
    write_file(&dir.path().join("nodes.dmp"), nodes);
    write_file(&dir.path().join("names.dmp"), names);
    write_file(&dir.path().join("merged.dmp"), merged);
    let tax = NcbiTaxonomy::load_dir(dir.path()).map_err(|e| rejected(e, fuzzed))?;
    let data = match fuzzed {
        "nodes.dmp" => nodes,
        "names.dmp" => names,
        _ => merged,
    };
    let taxids: Vec<TaxId> = numbers(data).collect();
    for &taxid in &taxids {
        if let Some(current) = tax.resolve(taxid) {
            assert!(tax.contains(current), "taxid {taxid} resolves to {current}, not a taxon");
        }
        let lineage = tax.lineage(taxid);
        if !tax.contains(taxid) {
            assert!(lineage.is_empty());
            continue;
        }
        assert_eq!((lineage.first(), lineage.last()), (Some(&ROOT), Some(&taxid)), "lineage of {taxid}");
        for pair in lineage.windows(2) {
            assert_eq!(tax.parent(pair[1]), Some(pair[0]), "lineage of {taxid}");
        }
        let _ = (tax.rank(taxid), tax.name(taxid));
    }
    let tree = TaxonTree::new(tax.prune(&taxids)).expect("pruned lineages form a valid tree");
    for &taxid in &taxids {
        assert_eq!(tree.contains(taxid), tax.contains(taxid), "taxid {taxid} pruned");
    }
    let mut later = NcbiTaxonomy::load_dir_without_names(dir.path()).map_err(|e| rejected(e, fuzzed))?;
    later.load_names(&taxids).map_err(|e| rejected(e, fuzzed))?;
    for &taxid in &taxids {
        assert_eq!(later.name(taxid), tax.name(taxid), "name of {taxid} read later");
    }
    Ok(())
}

/// The runs of ASCII digits in `data` that fit a taxid (at most 1,000 of them).
fn numbers(data: &[u8]) -> impl Iterator<Item = TaxId> + '_ {
    data.split(|b| !b.is_ascii_digit()).filter_map(|d| std::str::from_utf8(d).ok()?.parse().ok()).take(1000)
}

/// A sequence id → taxid map: Kraken's `seqid2taxid.map` or NCBI's `*.accession2taxid` (told
/// apart by the header line), plain or gzip; loaded whole, filtered, and twice over.
///
/// Checks on an accepted map: every line's firm id (the seqid, or the accession.version) maps to
/// the line's taxid, also in a filtered load that keeps the line; a file given twice loads as
/// once.
pub fn seqid_map(data: &[u8]) -> Outcome {
    let dir = scratch();
    let path = dir.path().join("seqid2taxid.map");
    write_file(&path, data);
    let map = SeqIdMap::load(std::slice::from_ref(&path)).map_err(|e| rejected(e, "seqid2taxid.map"))?;
    let keep = |id: &str| id.len() % 2 == 0;
    let filtered = SeqIdMap::load_filtered(std::slice::from_ref(&path), keep)
        .expect("a filtered load of an accepted map is accepted");
    let text = if data.starts_with(&[0x1f, 0x8b]) {
        let mut text = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::MultiGzDecoder::new(data), &mut text)
            .expect("an accepted map inflates");
        text
    } else {
        data.to_vec()
    };
    let text = std::str::from_utf8(&text).expect("an accepted map is text");
    let accession2taxid = text.lines().next() == Some("accession\taccession.version\ttaxid\tgi");
    for line in text.lines().skip(usize::from(accession2taxid)) {
        if line.bytes().all(|b| b.is_ascii_whitespace()) {
            continue;
        }
        let (id, taxid, kept) = if accession2taxid {
            let fields: Vec<&str> = line.split('\t').collect();
            (fields[1], fields[2], keep(fields[0]) || keep(fields[1]))
        } else {
            let fields: Vec<&str> = line.split_ascii_whitespace().collect();
            (fields[0], fields[1], keep(fields[0]))
        };
        let taxid: TaxId = taxid.parse().expect("an accepted map's taxids are numbers");
        if taxid != 0 {
            assert_eq!(map.get(id), Some(taxid), "firm id {id:?}");
            if kept {
                assert_eq!(filtered.get(id), Some(taxid), "firm id {id:?}, filtered");
            }
        }
    }
    let twice = SeqIdMap::load(&[path.clone(), path]).expect("a map given twice is accepted");
    assert_eq!(twice.len(), map.len());
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Sample sheets

/// A `--samples` sheet, parsed for single-end and for interleaved reads
/// (`classify::samples::parse_sample_sheet`).
///
/// Checks on an accepted sheet: names are non-empty, hold no `/` and are distinct; a line gives
/// at most one sample; pairs are pairs.
pub fn sample_sheet(data: &[u8]) -> Outcome {
    let (sheet, base) = (Path::new("samples.tsv"), Path::new("/sheets"));
    for interleaved in [false, true] {
        let samples = crate::classify::samples::parse_sample_sheet(data, sheet, base, interleaved)
            .map_err(|e| rejected(e, "samples.tsv"))?;
        assert!(!samples.is_empty() && samples.len() <= data.split(|&b| b == b'\n').count());
        let mut names = std::collections::HashSet::new();
        for (name, layout) in &samples {
            assert!(!name.is_empty() && !name.contains('/'), "sample name {name:?}");
            assert!(names.insert(name), "sample {name:?} twice");
            assert_eq!(layout.is_paired(), interleaved || matches!(layout, ReadLayout::Paired(_)));
            assert!(layout.sources().iter().all(|s| matches!(s, Source::File(_))), "a sheet names files");
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The index loader

/// An index file as given: opened with [`Verify::All`] and with [`Verify::Metadata`], and
/// whatever opens is used (see `use_index`).
///
/// Checks: what opens with every checksum verified also opens with only the metadata verified,
/// and then verifies whole.
pub fn index_open(data: &[u8]) -> Outcome {
    let dir = scratch();
    let path = dir.path().join("fuzz.db");
    write_file(&path, data);
    let all = Index::open(&path, Verify::All);
    let metadata = Index::open(&path, Verify::Metadata);
    if let Ok(index) = &all {
        assert!(index.verify_all().is_ok(), "an index opened with Verify::All fails verify_all");
        assert!(metadata.is_ok(), "opens with Verify::All but not with Verify::Metadata");
    }
    if let Ok(index) = &metadata {
        use_index(index);
    }
    all.map(|_| ()).map_err(|e| rejected(e, "fuzz.db"))
}

/// Like [`index_open`], after setting the header's and every section's checksum to match the
/// (mutated) bytes, so that mutations get past the checksums to the header's fields and the
/// sections' contents.
pub fn index_open_fixed(data: &[u8]) -> Outcome {
    index_open(&fix_checksums(data))
}

/// Reads cut from the seed indexes' genomes (`fuzz/make_corpus.sh`): phage lambda, a pair of
/// deformed wing virus, and that virus in lowercase with an N run; classified with a fuzzed index.
const READS: &[&[&str]] = &[
    &[
        "CGCCACGACGATGAACAGACGCTGCTGCGTGTGGATGAGGCCATCAATAAAACCTATACCCGCCGGAATGGTGCAGAAATGTCGATATCCCGTATCTGCTGGGATACTGGCGGGATTGACCCGACCATTGTGTATGAACGCTCGAAAAAA",
    ],
    &[
        "ATTATTTATGAAGTGACTAGCAATCATGGATTAAATTAGATGGTATTCTAGTTTAGAGGTGATTCGGCGCTGCGGTGCGACTGAAACTTCTAAATTAGCATGTCAGATTATATTATGAATGCGTTAGTAGTAATTTCTGCGATAGAGCTG",
        "CAAATAAAAACAGCAAAATAAATCAGCAATAAAGACAGCATTAAAATAAAATATGATGTCTTTCCATCCGCCATCGTCTGGGCTATGAGACATTAACGGGTGCCCTGCGAACGTAACGTACCGTAGCACAAATTATACTGTATTAAAAGG",
    ],
    &["agcangcgaatgtatntttaagaaacctaaatatacgcgcnnnnnnnnnnnnnnnnnnnntgttgcaactcgcttcgttcgtgaaaaagttgttcgtcct"],
];

/// What a classification with an accepted index does, on the CPU: describe it, walk its
/// taxonomy, look up every stored feature and decode its list, classify [`READS`] and write their
/// Kraken lines and report. A damaged index opened without verifying its large sections may give
/// wrong answers here, never a panic.
///
/// Checks: every target's taxon is in the tree; the list decoder of the classifier's hot path
/// gives what the plain one gives; a read classifies alike alone and in a group; candidates are
/// targets of the index; calls are taxa of the tree; info serialises to JSON.
pub(crate) fn use_index(index: &Index) {
    let info = crate::info::describe(index, false);
    let _ = crate::info::render_text(&info);
    serde_json::to_string(&info).expect("index info serialises to JSON");

    let tree = index.taxonomy();
    let taxids: Vec<TaxId> = tree.taxa().iter().map(|t| t.taxid).collect();
    for (i, &taxid) in taxids.iter().enumerate() {
        let _ = (tree.lineage(taxid), tree.kreport_rank_code(taxid), tree.children(taxid));
        let _ = tree.ancestor_at_rank(taxid, "species");
        let _ = tree.lca(taxid, taxids[(i * 7 + 3) % taxids.len()]);
    }
    for target in index.targets() {
        assert!(tree.contains(target.taxid), "target {} has taxid {} outside the tree", target.name, target.taxid);
    }
    if let Ok(lists) = index.clade_lists() {
        let listed: usize = lists.iter().map(|(_, list)| list.len()).sum();
        assert_eq!(listed, lists.locations(), "the clade lists cover the section");
    }

    let mut decoded = Vec::new();
    let stored = (0..index.shard_count())
        .flat_map(|shard| index.shard_keys(shard).slots().map(move |slot| (shard, slot)).collect::<Vec<_>>());
    for (shard, slot) in stored.take(4096) {
        index.prefetch(slot.key);
        index.prefetch_list(shard, slot.list);
        let _ = index.lookup_value(slot.key);
        let _ = index.lookup(slot.key);
        let list = index.list(shard, slot.list);
        decoded.clear();
        list.append_to(&mut decoded);
        assert!(decoded.iter().copied().eq(list.iter()), "the two list decoders disagree");
    }

    let params = ClassifyParams::defaults(index.header().sketch.sketch_size);
    let targets = crate::classify::candidates::TargetTables::new(index);
    let target_taxa = &targets.taxa;
    let mut classifier = Classifier::new(&params, &targets);
    classifier.keep_candidates = true;
    let reads: Vec<Vec<&[u8]>> = READS.iter().map(|mates| mates.iter().map(|m| m.as_bytes()).collect()).collect();
    let reads: Vec<&[&[u8]]> = reads.iter().map(Vec::as_slice).collect();
    let calls = classifier.classify_group(&reads, true);
    let mut direct: HashMap<TaxId, u64> = HashMap::new();
    let mut lines = Vec::new();
    for (i, (call, mates)) in calls.into_iter().zip(&reads).enumerate() {
        for &(target, _) in &call.candidates {
            assert!((target as usize) < target_taxa.len(), "candidate target {target}");
        }
        assert_eq!(classifier.classify(mates, false).taxid, call.taxid, "read {i} alone and in a group");
        if call.taxid != 0 {
            *direct.entry(call.taxid).or_default() += 1;
        }
        let result = crate::output::ReadResult {
            id: format!("read{i}").into(),
            taxid: call.taxid,
            lengths: (mates[0].len(), mates.get(1).map(|m| m.len())),
            hits: [&call.hit_runs[0], &call.hit_runs[1]],
        };
        crate::output::write_kraken_line(&mut lines, &result, Some(tree)).expect("a call is a taxon of the tree");
    }
    crate::output::write_kreport(&mut lines, tree, &direct, 1, false).expect("calls are taxa of the tree");
}

// ---------------------------------------------------------------------------------------------
// `--candidates-out` files in merge

/// `kmerdb merge` of candidates files: `data` is cut before every later occurrence of the
/// candidates file magic (so a seed of two files back to back is a merge of two parts, at most
/// four), each piece a part (plain, or gzip by its content), merged into every output merge
/// writes.
///
/// Checks on an accepted merge: one Kraken line per read; at most as many classified reads.
pub fn merge_candidates(data: &[u8]) -> Outcome {
    use crate::output::candidates::FILE_MAGIC;
    let mut starts = vec![0];
    starts.extend((1..data.len()).filter(|&i| data[i..].starts_with(FILE_MAGIC)).take(3));
    starts.push(data.len());
    let dir = scratch();
    let d = dir.path();
    let inputs: Vec<PathBuf> = starts
        .windows(2)
        .enumerate()
        .map(|(i, w)| {
            let path = d.join(format!("part{}.cand", i + 1));
            write_file(&path, &data[w[0]..w[1]]);
            path
        })
        .collect();
    let config = crate::merge::MergeConfig {
        inputs,
        kraken: Some(d.join("out.kraken")),
        report: Some(d.join("out.kreport")),
        abundance: Some(d.join("out.abundance.tsv")),
        abundance_rank: Some("species".into()),
        cami: Some(d.join("out.cami")),
        krona: Some(d.join("out.krona")),
        mpa: Some(d.join("out.mpa")),
        sample: "fuzz".into(),
        html: Some(d.join("out.html")),
        use_names: true,
        report_zero_counts: false,
        confidence: 0.5,
    };
    let summary = crate::merge::merge(&config).map_err(|e| rejected(e, ".cand"))?;
    let kraken = std::fs::read(d.join("out.kraken")).expect("merge wrote its per-read lines");
    assert_eq!(kraken.iter().filter(|&&b| b == b'\n').count() as u64, summary.reads, "Kraken lines");
    assert!(summary.classified <= summary.reads);
    Ok(())
}

/// [`merge_candidates`] with each part's block checksums recomputed after mutation (plain parts
/// only: a gzipped one is left as it is), so that damage reaches the header and records instead
/// of stopping at the first checksum.
pub fn merge_candidates_fixed(data: &[u8]) -> Outcome {
    use crate::output::candidates::FILE_MAGIC;
    let mut out = data.to_vec();
    let mut starts: Vec<usize> = (0..out.len()).filter(|&i| out[i..].starts_with(FILE_MAGIC)).collect();
    starts.push(out.len());
    for w in starts.windows(2) {
        crate::output::candidates::fix_checksums(&mut out[w[0]..w[1]]);
    }
    merge_candidates(&out)
}
