//! Synthetic reference genomes for benchmarks at sizes no real set here reaches: random "species"
//! genomes, each with strain-like copies that differ by point mutations, so that features are
//! shared between strains as in real collections. Deterministic for a seed.

pub mod scale;

use std::io::Write;

/// Shape of a synthetic collection.
#[derive(Debug, Clone, Copy)]
pub struct SynthSpec {
    pub species: usize,
    pub genome_len: usize,
    pub strains: usize,
    /// Fraction of bases changed in each strain (e.g. 0.01).
    pub divergence: f64,
    pub seed: u64,
}

impl SynthSpec {
    pub fn total_bases(&self) -> u64 {
        (self.species * self.strains * self.genome_len) as u64
    }
}

/// A small, fast, deterministic generator (splitmix64).
pub(crate) struct Mix(pub(crate) u64);

impl Mix {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        kmerdb::sketch::fmix64(self.0)
    }
}

/// Calls `f(name, sequence)` for every strain of every species, species after species.
pub fn generate(spec: &SynthSpec, mut f: impl FnMut(&str, &[u8])) {
    generate_species(spec, 0..spec.species, 1, spec.strains, |_, _, name, seq| f(name, seq))
}

/// [`generate`] for the species `range` that are `first + k * step` (each species depends on the
/// seed and its number only, so parts can be made in parallel), `strains` of each: more than
/// `spec.strains` makes strains the collection leaves out (the ones before are the same either
/// way). `f(species, strain, name, sequence)`.
pub(crate) fn generate_species(
    spec: &SynthSpec,
    range: std::ops::Range<usize>,
    step: usize,
    strains: usize,
    mut f: impl FnMut(usize, usize, &str, &[u8]),
) {
    const BASES: &[u8; 4] = b"ACGT";
    let mut seq = vec![0u8; spec.genome_len];
    for sp in range.step_by(step) {
        let mut rng = Mix(spec.seed ^ (sp as u64).wrapping_mul(0xd1b5_4a32_d192_ed03));
        for chunk in seq.chunks_mut(32) {
            let mut r = rng.next();
            for b in chunk {
                *b = BASES[(r & 3) as usize];
                r >>= 2;
            }
        }
        let mut strain = seq.clone();
        for st in 0..strains {
            if st > 0 {
                strain.copy_from_slice(&seq);
                let mutations = (spec.genome_len as f64 * spec.divergence) as usize;
                for _ in 0..mutations {
                    let r = rng.next();
                    let at = (r >> 8) as usize % spec.genome_len;
                    strain[at] = BASES[((r & 3) as usize + 1 + (strain[at] as usize & 1)) % 4];
                }
            }
            f(sp, st, &strain_name(sp, st), &strain);
        }
    }
}

/// A strain's sequence id in the FASTA files.
pub(crate) fn strain_name(species: usize, strain: usize) -> String {
    format!("synth_s{species}_st{strain}")
}

/// Writes the collection as FASTA files, species dealt to `files` round-robin, one thread per file.
pub fn write_fasta_files(spec: &SynthSpec, files: &[std::path::PathBuf]) -> std::io::Result<()> {
    std::thread::scope(|scope| {
        let jobs: Vec<_> = files
            .iter()
            .enumerate()
            .map(|(i, path)| {
                scope.spawn(move || -> std::io::Result<()> {
                    let mut out = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(path)?);
                    let mut result = Ok(());
                    generate_species(spec, i..spec.species, files.len(), spec.strains, |_, _, name, seq| {
                        if result.is_ok() {
                            result = write_record(&mut out, name, seq);
                        }
                    });
                    result?;
                    out.flush()
                })
            })
            .collect();
        jobs.into_iter().try_for_each(|j| j.join().expect("a writer does not panic"))
    })
}

pub(crate) fn write_record(out: &mut impl Write, name: &str, seq: &[u8]) -> std::io::Result<()> {
    writeln!(out, ">{name}")?;
    for line in seq.chunks(80) {
        out.write_all(line)?;
        out.write_all(b"\n")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strains_are_close_and_species_are_not() {
        let spec = SynthSpec { species: 2, genome_len: 10_000, strains: 2, divergence: 0.01, seed: 1 };
        let mut seqs = Vec::new();
        generate(&spec, |_, s| seqs.push(s.to_vec()));
        let diff = |a: &[u8], b: &[u8]| a.iter().zip(b).filter(|(x, y)| x != y).count();
        assert!(diff(&seqs[0], &seqs[1]) <= 100 && diff(&seqs[0], &seqs[1]) > 50);
        assert!(diff(&seqs[0], &seqs[2]) > 6000);
        let mut again = Vec::new();
        generate(&spec, |_, s| again.push(s.to_vec()));
        assert_eq!(seqs, again);
    }

    /// Writes the collection as FASTA (80 bases a line).
    fn write_fasta(spec: &SynthSpec, out: &mut impl Write) -> std::io::Result<()> {
        let mut result = Ok(());
        generate(spec, |name, seq| {
            if result.is_err() {
                return;
            }
            result = write_record(out, name, seq);
        });
        result
    }

    /// Files written in parallel hold every species once, each as `generate` makes it.
    #[test]
    fn parallel_files_hold_the_same_genomes() {
        let spec = SynthSpec { species: 5, genome_len: 1000, strains: 2, divergence: 0.01, seed: 3 };
        let dir = tempfile::tempdir().unwrap();
        let files: Vec<_> = (0..3).map(|i| dir.path().join(format!("f{i}.fa"))).collect();
        write_fasta_files(&spec, &files).unwrap();
        let mut all = Vec::new();
        write_fasta(&spec, &mut all).unwrap();
        let records = |text: &str| -> Vec<String> {
            let mut r: Vec<String> = text.split('>').filter(|x| !x.is_empty()).map(String::from).collect();
            r.sort();
            r
        };
        let joined: String = files.iter().map(|f| std::fs::read_to_string(f).unwrap()).collect();
        assert_eq!(records(&joined), records(std::str::from_utf8(&all).unwrap()));
    }
}
