//! The classify benchmark at users' scale (issue 32): a strain-rich synthetic collection
//! ([`SynthSpec`]) written as FASTA with the NCBI-format taxonomy it implies, and simulated read
//! pairs of three kinds, shuffled together:
//! - of the indexed strains;
//! - of strains the collection leaves out: each species has one more strain, made after its
//!   indexed ones from the same generator, so the indexed strains are those of the plain
//!   collection (a new strain of a known species: what users' samples mostly hold);
//! - of species nothing indexed is related to, in genera of their own (negative controls: every
//!   species or genus call of them is wrong).
//!
//! Each pair's truth goes to `truth.tsv` in the format of `../shared/tools/score.py`. Everything
//! depends on the seeds only, not on the number of files or threads. The folder holds
//! `genomes/synthNN.fna`, `seqid2taxid.map`, `taxonomy/nodes.dmp`, `taxonomy/names.dmp`,
//! `r1.fq`, `r2.fq` and `truth.tsv`.

use super::{Mix, SynthSpec, generate_species, strain_name, write_record};
use std::io::{self, Write};
use std::path::Path;

/// The simulated pairs: how many of each kind and how they are sequenced.
#[derive(Debug, Clone, Copy)]
pub struct ReadPlan {
    pub pairs: usize,
    /// Share of the pairs from the strains the collection leaves out.
    pub left_out_share: f64,
    /// Share from species nothing indexed is related to.
    pub unindexed_share: f64,
    /// Mean substitution rate; it grows along the read as Illumina's does (half the mean at the
    /// first base, 1.5 times at the last).
    pub error_rate: f64,
    pub read_len: usize,
    pub seed: u64,
}

impl ReadPlan {
    /// Pairs of indexed strains, of left-out strains, of unindexed species.
    pub fn counts(&self) -> [usize; 3] {
        let left_out = (self.pairs as f64 * self.left_out_share).round() as usize;
        let unindexed = (self.pairs as f64 * self.unindexed_share).round() as usize;
        [self.pairs.saturating_sub(left_out + unindexed), left_out, unindexed]
    }
}

/// What [`write()`] wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    /// Pairs of indexed strains, of left-out strains, of unindexed species.
    pub pairs: [usize; 3],
    pub genome_bases: u64,
}

/// The kinds of pairs, as [`ReadPlan::counts`] orders them.
const INDEXED: usize = 0;
const LEFT_OUT: usize = 1;
const UNINDEXED: usize = 2;

/// Species a genus holds.
const GENUS_SPECIES: usize = 10;

/// Fragment lengths, uniform in this range.
const INSERT: std::ops::Range<usize> = 250..351;

/// Unrelated species the negative controls come from: one for 20 indexed ones, at least one.
fn unindexed_species(spec: &SynthSpec) -> usize {
    (spec.species / 20).max(1)
}

fn genus_taxid(genus: usize) -> u64 {
    10 + genus as u64
}

fn species_taxid(species: usize) -> u64 {
    1_000_000 + species as u64
}

/// Strains have taxids of their own below their species', as RefSeq's assemblies often do.
fn strain_taxid(species: usize, strain: usize) -> u64 {
    100_000_000 + (species as u64) * 16 + strain as u64
}

/// `total` shared between `n` as evenly as can be: part `i`'s share.
fn share(total: usize, n: usize, i: usize) -> usize {
    total / n + usize::from(i < total % n)
}

/// Writes the collection, its taxonomy and the pairs into `dir` (created), the genomes into
/// `files` FASTA files made in parallel; with `zstd`, compressed (`synthNN.fna.zst`, level 1:
/// about a quarter of the bytes, so that 50 Gbp, its reads and its index fit a 64 GB disk).
pub fn write(spec: &SynthSpec, plan: &ReadPlan, dir: &Path, files: usize, zstd: bool) -> io::Result<Written> {
    let invalid = |what: String| io::Error::new(io::ErrorKind::InvalidInput, what);
    if spec.strains == 0 || spec.strains > 15 {
        return Err(invalid(format!("{} strains a species: 1 to 15 (one more is left out)", spec.strains)));
    }
    if plan.read_len == 0 || plan.read_len > INSERT.start || spec.genome_len < 2 * INSERT.end {
        return Err(invalid(format!(
            "reads of {} bases from genomes of {}: reads must be 1 to {} bases, genomes at least {}",
            plan.read_len,
            spec.genome_len,
            INSERT.start,
            2 * INSERT.end
        )));
    }
    let fraction = |x: f64| (0.0..=1.0).contains(&x);
    if !fraction(plan.left_out_share)
        || !fraction(plan.unindexed_share)
        || plan.left_out_share + plan.unindexed_share > 1.0
        || !(0.0..1.0).contains(&plan.error_rate)
    {
        return Err(invalid(format!(
            "shares of left-out ({}) and unrelated ({}) pairs must be 0 to 1 and sum to at most 1, the error rate ({}) 0 to below 1",
            plan.left_out_share, plan.unindexed_share, plan.error_rate
        )));
    }
    let files = files.max(1);
    let genomes = dir.join("genomes");
    std::fs::create_dir_all(&genomes)?;
    std::fs::create_dir_all(dir.join("taxonomy"))?;
    write_taxonomy(spec, dir)?;
    let counts = plan.counts();
    let suffix = if zstd { ".zst" } else { "" };
    let paths: Vec<_> = (0..files).map(|i| genomes.join(format!("synth{i:02}.fna{suffix}"))).collect();
    let unrelated = unindexed_species(spec);
    let mut pairs: Vec<Pair> = std::thread::scope(|scope| {
        let jobs: Vec<_> = paths
            .iter()
            .enumerate()
            .map(|(i, path)| {
                scope.spawn(move || -> io::Result<Vec<Pair>> {
                    let file = std::fs::File::create(path)?;
                    let sink = match zstd {
                        true => GenomeFile::Zstd(zstd::Encoder::new(file, 1)?),
                        false => GenomeFile::Plain(file),
                    };
                    let mut out = io::BufWriter::with_capacity(1 << 20, sink);
                    let mut result = Ok(());
                    let mut pairs = Vec::new();
                    generate_species(spec, i..spec.species, files, spec.strains + 1, |sp, st, name, seq| {
                        let (kind, n) = if st < spec.strains {
                            let n = share(share(counts[INDEXED], spec.species, sp), spec.strains, st);
                            (INDEXED, n)
                        } else {
                            (LEFT_OUT, share(counts[LEFT_OUT], spec.species, sp))
                        };
                        sample(plan, seq, sp, st, kind, n, &mut pairs);
                        if kind == INDEXED && result.is_ok() {
                            result = write_record(&mut out, name, seq);
                        }
                    });
                    // The unrelated species: numbered after the collection's, one strain each.
                    let one = SynthSpec { strains: 1, ..*spec };
                    let range = spec.species..spec.species + unrelated;
                    generate_species(&one, range.start + i..range.end, files, 1, |sp, st, _, seq| {
                        let n = share(counts[UNINDEXED], unrelated, sp - spec.species);
                        sample(plan, seq, sp, st, UNINDEXED, n, &mut pairs);
                    });
                    result?;
                    out.into_inner().map_err(io::IntoInnerError::into_error)?.finish()?;
                    Ok(pairs)
                })
            })
            .collect();
        jobs.into_iter()
            .map(|j| j.join().expect("a writer does not panic"))
            .collect::<io::Result<Vec<_>>>()
            .map(|parts| parts.into_iter().flatten().collect())
    })?;
    pairs.sort_unstable_by_key(|p| (p.order, p.id));
    write_pairs(plan, &pairs, dir)?;
    let mut seqmap = io::BufWriter::new(std::fs::File::create(dir.join("seqid2taxid.map"))?);
    for sp in 0..spec.species {
        for st in 0..spec.strains {
            writeln!(seqmap, "{}\t{}", strain_name(sp, st), strain_taxid(sp, st))?;
        }
    }
    seqmap.flush()?;
    Ok(Written { pairs: counts, genome_bases: spec.total_bases() })
}

/// A genome file being written, plain or compressed.
enum GenomeFile {
    Plain(std::fs::File),
    Zstd(zstd::Encoder<'static, std::fs::File>),
}

impl GenomeFile {
    /// Ends the file (a compressed one's last frame).
    fn finish(self) -> io::Result<()> {
        match self {
            GenomeFile::Plain(_) => Ok(()),
            GenomeFile::Zstd(z) => z.finish().map(drop),
        }
    }
}

impl Write for GenomeFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            GenomeFile::Plain(f) => f.write(buf),
            GenomeFile::Zstd(z) => z.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            GenomeFile::Plain(f) => f.flush(),
            GenomeFile::Zstd(z) => z.flush(),
        }
    }
}

/// One simulated pair: both mates' bases (mate 1 then mate 2, `read_len` each), where it came
/// from and its place in the shuffled order.
struct Pair {
    order: u64,
    id: u64,
    species: u32,
    strain: u8,
    kind: u8,
    bases: Box<[u8]>,
}

/// `n` pairs of one strain (`seq`), each from a random fragment of a random strand, with
/// substitutions as the plan says.
fn sample(plan: &ReadPlan, seq: &[u8], sp: usize, st: usize, kind: usize, n: usize, out: &mut Vec<Pair>) {
    let id0 = ((sp as u64) << 40) | ((st as u64) << 32);
    let mut rng = Mix(plan.seed ^ kmerdb::sketch::fmix64(id0 | 0xFFFF_FFFF));
    let len = plan.read_len;
    let mut fragment = Vec::with_capacity(INSERT.end);
    for i in 0..n as u64 {
        let insert = INSERT.start + (rng.next() % INSERT.len() as u64) as usize;
        let at = (rng.next() % (seq.len() - insert) as u64) as usize;
        fragment.clear();
        fragment.extend_from_slice(&seq[at..at + insert]);
        if rng.next() & 1 == 1 {
            reverse_complement(&mut fragment);
        }
        let mut bases = Vec::with_capacity(2 * len);
        bases.extend_from_slice(&fragment[..len]);
        let mut mate2 = fragment[insert - len..].to_vec();
        reverse_complement(&mut mate2);
        bases.extend_from_slice(&mate2);
        for mate in bases.chunks_mut(len) {
            for (j, b) in mate.iter_mut().enumerate() {
                let rate = plan.error_rate * (0.5 + j as f64 / (len.max(2) - 1) as f64);
                let r = rng.next();
                if ((r >> 11) as f64) < rate * (1u64 << 53) as f64 {
                    // Another base than the true one, each of the three alike.
                    let code = b"ACGT".iter().position(|&x| x == *b).unwrap_or(0);
                    *b = b"ACGT"[(code + 1 + (r & 0x3FF) as usize % 3) % 4];
                }
            }
        }
        let id = id0 | i;
        out.push(Pair {
            order: kmerdb::sketch::fmix64(plan.seed ^ kmerdb::sketch::fmix64(id)),
            id,
            species: sp as u32,
            strain: st as u8,
            kind: kind as u8,
            bases: bases.into_boxed_slice(),
        });
    }
}

fn reverse_complement(seq: &mut [u8]) {
    seq.reverse();
    for b in seq {
        // The genomes hold A, C, G and T only.
        *b = match *b {
            b'A' => b'T',
            b'C' => b'G',
            b'G' => b'C',
            b'T' => b'A',
            _ => b'N',
        };
    }
}

/// The pairs in their shuffled order as `r1.fq`, `r2.fq` (named `rN/1`, `rN/2`) and their
/// truth: the strain's sequence id and taxid (`-` and the species' taxid for unrelated species).
fn write_pairs(plan: &ReadPlan, pairs: &[Pair], dir: &Path) -> io::Result<()> {
    let len = plan.read_len;
    // Qualities falling along the read as its error rate rises.
    let quality: Vec<u8> = (0..len).map(|j| b'I' - (j * 10 / len) as u8).collect();
    let mates = |m: usize| -> io::Result<()> {
        let mut w = io::BufWriter::with_capacity(1 << 22, std::fs::File::create(dir.join(format!("r{}.fq", m + 1)))?);
        for (i, p) in pairs.iter().enumerate() {
            writeln!(w, "@r{i}/{}", m + 1)?;
            w.write_all(&p.bases[m * len..(m + 1) * len])?;
            w.write_all(b"\n+\n")?;
            w.write_all(&quality)?;
            w.write_all(b"\n")?;
        }
        w.flush()
    };
    let truth = || -> io::Result<()> {
        let mut w = io::BufWriter::with_capacity(1 << 22, std::fs::File::create(dir.join("truth.tsv"))?);
        writeln!(w, "read_id\tgenome_id\ttaxid\tkind")?;
        for (i, p) in pairs.iter().enumerate() {
            let (sp, st) = (p.species as usize, p.strain as usize);
            let (genome, taxid) = match p.kind as usize {
                UNINDEXED => ("-".to_string(), species_taxid(sp)),
                _ => (strain_name(sp, st), strain_taxid(sp, st)),
            };
            let kind = ["indexed", "left_out", "unindexed"][p.kind as usize];
            writeln!(w, "r{i}\t{genome}\t{taxid}\t{kind}")?;
        }
        w.flush()
    };
    std::thread::scope(|scope| {
        let jobs = [scope.spawn(|| mates(0)), scope.spawn(|| mates(1)), scope.spawn(truth)];
        jobs.into_iter().try_for_each(|j| j.join().expect("a writer does not panic"))
    })
}

/// nodes.dmp and names.dmp: root, Bacteria, one family; genera of ten species; each species'
/// strains below it (the left-out one too); the unrelated species in genera of their own.
fn write_taxonomy(spec: &SynthSpec, dir: &Path) -> io::Result<()> {
    let mut nodes: Vec<(u64, u64, &str, String)> = vec![
        (1, 1, "no rank", "root".into()),
        (2, 1, "superkingdom", "Bacteria".into()),
        (3, 2, "family", "Synthaceae".into()),
    ];
    let all = spec.species + unindexed_species(spec);
    // The unrelated species' genera start after the collection's.
    let genus_of = |sp: usize| {
        if sp < spec.species {
            sp / GENUS_SPECIES
        } else {
            spec.species.div_ceil(GENUS_SPECIES) + (sp - spec.species) / GENUS_SPECIES
        }
    };
    let mut last_genus = None;
    for sp in 0..all {
        let g = genus_of(sp);
        if last_genus != Some(g) {
            nodes.push((genus_taxid(g), 3, "genus", format!("Synthgenus g{g}")));
            last_genus = Some(g);
        }
        nodes.push((species_taxid(sp), genus_taxid(g), "species", format!("Synthgenus g{g} s{sp}")));
        let strains = if sp < spec.species { spec.strains + 1 } else { 1 };
        for st in 0..strains {
            nodes.push((strain_taxid(sp, st), species_taxid(sp), "strain", format!("Synthgenus g{g} s{sp} st{st}")));
        }
    }
    let mut w = io::BufWriter::new(std::fs::File::create(dir.join("taxonomy/nodes.dmp"))?);
    for (t, p, rank, _) in &nodes {
        writeln!(w, "{t}\t|\t{p}\t|\t{rank}\t|\t\t|")?;
    }
    w.flush()?;
    let mut w = io::BufWriter::new(std::fs::File::create(dir.join("taxonomy/names.dmp"))?);
    for (t, _, _, name) in &nodes {
        writeln!(w, "{t}\t|\t{name}\t|\t\t|\tscientific name\t|")?;
    }
    w.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> (SynthSpec, ReadPlan) {
        let spec = SynthSpec { species: 25, genome_len: 20_000, strains: 3, divergence: 0.01, seed: 7 };
        let plan = ReadPlan {
            pairs: 2_000,
            left_out_share: 0.2,
            unindexed_share: 0.05,
            error_rate: 0.005,
            read_len: 150,
            seed: 9,
        };
        (spec, plan)
    }

    fn read(dir: &Path, name: &str) -> String {
        std::fs::read_to_string(dir.join(name)).unwrap()
    }

    /// The same bytes whatever the number of files (threads) or their compression, and the
    /// genomes those of the plain collection: the left-out strains and unrelated species change
    /// nothing indexed.
    #[test]
    fn the_collection_and_its_reads_do_not_depend_on_the_files() {
        let (spec, plan) = small();
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let wa = write(&spec, &plan, a.path(), 1, false).unwrap();
        let wb = write(&spec, &plan, b.path(), 4, true).unwrap();
        assert_eq!(wa, wb);
        assert_eq!(wa.pairs, [1_500, 400, 100]);
        for f in ["r1.fq", "r2.fq", "truth.tsv", "seqid2taxid.map", "taxonomy/nodes.dmp", "taxonomy/names.dmp"] {
            assert_eq!(read(a.path(), f), read(b.path(), f), "{f}");
        }
        let records = |dir: &Path, n: usize| -> Vec<String> {
            let file = |i: usize| {
                let plain = dir.join(format!("genomes/synth{i:02}.fna"));
                match plain.exists() {
                    true => std::fs::read_to_string(plain).unwrap(),
                    false => {
                        let z = std::fs::read(plain.with_extension("fna.zst")).unwrap();
                        String::from_utf8(zstd::decode_all(&z[..]).unwrap()).unwrap()
                    }
                }
            };
            let text: String = (0..n).map(file).collect();
            let mut r: Vec<String> = text.split('>').filter(|x| !x.is_empty()).map(String::from).collect();
            r.sort();
            r
        };
        let mut plain = Vec::new();
        super::super::generate(&spec, |name, seq| {
            super::super::write_record(&mut plain, name, seq).unwrap();
        });
        let plain_dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(plain_dir.path().join("genomes")).unwrap();
        std::fs::write(plain_dir.path().join("genomes/synth00.fna"), plain).unwrap();
        assert_eq!(records(a.path(), 1), records(b.path(), 4));
        assert_eq!(records(a.path(), 1), records(plain_dir.path(), 1));
    }

    /// Every read comes from where its truth says, with about the planned errors, and the
    /// taxonomy holds every truth's taxid under the right species.
    #[test]
    fn reads_match_their_truth() {
        let (spec, plan) = small();
        let dir = tempfile::tempdir().unwrap();
        write(&spec, &plan, dir.path(), 3, false).unwrap();
        let mut genomes = std::collections::HashMap::new();
        super::super::generate_species(&spec, 0..spec.species, 1, spec.strains + 1, |_, _, name, seq| {
            genomes.insert(name.to_string(), seq.to_vec());
        });
        let nodes = read(dir.path(), "taxonomy/nodes.dmp");
        let parent: std::collections::HashMap<&str, &str> = nodes
            .lines()
            .map(|l| {
                let f: Vec<&str> = l.split("\t|\t").collect();
                (f[0], f[1])
            })
            .collect();
        let r1 = read(dir.path(), "r1.fq");
        let truth = read(dir.path(), "truth.tsv");
        let (mut mismatches, mut bases, mut kinds) = (0usize, 0usize, [0usize; 3]);
        let records: Vec<&str> = r1.lines().collect();
        assert_eq!(records.len(), 4 * 2_000);
        for (i, (record, line)) in records.chunks(4).zip(truth.lines().skip(1)).enumerate() {
            let t: Vec<&str> = line.split('\t').collect();
            assert_eq!(record[0], format!("@{}/1", t[0]));
            assert!(parent.contains_key(t[2]), "taxid {} in nodes.dmp", t[2]);
            let kind = ["indexed", "left_out", "unindexed"].iter().position(|k| *k == t[3]).unwrap();
            kinds[kind] += 1;
            // Each read's place is searched for in its whole genome: a sample of them.
            if kind == UNINDEXED || i % 8 != 0 {
                continue;
            }
            let g = &genomes[t[1]];
            let species = parent[t[2]];
            let sp: usize = t[1].trim_start_matches("synth_s").split('_').next().unwrap().parse().unwrap();
            assert_eq!(species, species_taxid(sp).to_string());
            // Mate 1 lies on one strand or the other: the place with the fewest differences.
            let m = record[1].as_bytes();
            let mut rc = m.to_vec();
            reverse_complement(&mut rc);
            let best = g
                .windows(m.len())
                .map(|w| {
                    w.iter()
                        .zip(m)
                        .filter(|(a, b)| a != b)
                        .count()
                        .min(w.iter().zip(&rc).filter(|(a, b)| a != b).count())
                })
                .min()
                .unwrap();
            assert!(best <= 10, "read {} is {best} bases from its genome", t[0]);
            mismatches += best;
            bases += m.len();
        }
        assert_eq!(kinds, [1_500, 400, 100]);
        let rate = mismatches as f64 / bases as f64;
        assert!((0.003..0.007).contains(&rate), "error rate {rate}");
        let seqmap = read(dir.path(), "seqid2taxid.map");
        assert_eq!(seqmap.lines().count(), spec.species * spec.strains);
        assert!(!seqmap.contains("_st3\t"), "the left-out strains are not mapped");
    }
}
