//! Output writers: the last pipeline stage, turning classification results into the files that
//! users' tools read.
//!
//! - [`write_kraken_line`]: Kraken's per-read output, one line per read or pair
//!   ([`ReadResult`] holds what a line needs);
//! - [`write_kreport`]: the Kraken report (kreport) that Bracken, MultiQC, Pavian and taxpasta read,
//!   with [`clade_counts`] for anything that needs reads per clade;
//! - [`write_abundance`]: a plain TSV of reads per taxon, optionally summed to one rank;
//! - [`create_output`] / [`Output`]: where those go: stdout for `-`, gzip for names ending in
//!   `.gz`, and for files a temporary name that only [`Output::finish`] renames to the final one,
//!   so a failed run never leaves a half-written file under the name the user asked for;
//! - [`ReadsWriter`]: `--classified-out` / `--unclassified-out` sequences, one file per mate.
//!
//! Formats follow Kraken 2 (per-read lines, `0:0` and `|:|` in hit lists, the report's columns,
//! rank codes and ordering, `_1`/`_2` for `#` in paired file names); where kmerdb differs it says so
//! in the item's documentation (chiefly: a report always has a line MultiQC recognises, even for
//! zero reads, and report order is deterministic on ties).
//!
//! Invariants every writer keeps: taxid 0 means unclassified and is never a taxon; every taxid
//! given to a writer is in the [`TaxonTree`](crate::taxonomy::TaxonTree), and one that is not is a
//! caller bug reported as an [`std::io::Error`] of kind [`InvalidData`](std::io::ErrorKind)
//! naming the taxid, never silently dropped or written.

mod abundance;
pub mod candidates;
mod file;
mod html;
mod kraken;
mod kreport;
mod profiles;
mod reads;

pub use abundance::write_abundance;
pub use file::{Output, create_output, note_stdout_closed, stdout_closed_error};
pub use html::{RunSettings, SampleView, write_html};
pub use kraken::{
    ReadResult, parse_hit_list, read_id, read_id_bytes, write_hit_list, write_kraken_line,
    write_kraken_line_with_hit_text,
};
pub use kreport::{clade_counts, write_kreport};
pub use profiles::{write_cami, write_krona, write_mpa};
pub use reads::{ReadsWriter, mate_paths};

use std::io;

use crate::taxonomy::TaxId;

/// The error for a taxid that a writer was given but the tree does not hold.
fn unknown_taxid(taxid: TaxId, what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("{what}: taxid {taxid} is not in the index's taxonomy"))
}

#[cfg(test)]
pub(crate) mod test_tree {
    use crate::taxonomy::{TaxId, Taxon, TaxonTree};

    fn t(taxid: TaxId, parent: TaxId, rank: &str, name: &str) -> Taxon {
        Taxon { taxid, parent, rank: rank.into(), name: name.into() }
    }

    /// root → cellular organisms → Bacteria → ... → Enterobacteriaceae, holding Escherichia
    /// (E. coli → K-12), Salmonella (S. enterica) and Shigella (S. flexneri); plus Viruses under
    /// the root, which tests leave without reads.
    pub(crate) fn tree() -> TaxonTree {
        TaxonTree::new(vec![
            t(1, 1, "no rank", "root"),
            t(131567, 1, "no rank", "cellular organisms"),
            t(2, 131567, "superkingdom", "Bacteria"),
            t(1224, 2, "phylum", "Pseudomonadota"),
            t(1236, 1224, "class", "Gammaproteobacteria"),
            t(91347, 1236, "order", "Enterobacterales"),
            t(543, 91347, "family", "Enterobacteriaceae"),
            t(561, 543, "genus", "Escherichia"),
            t(562, 561, "species", "Escherichia coli"),
            t(83333, 562, "strain", "Escherichia coli K-12"),
            t(590, 543, "genus", "Salmonella"),
            t(28901, 590, "species", "Salmonella enterica"),
            t(620, 543, "genus", "Shigella"),
            t(623, 620, "species", "Shigella flexneri"),
            t(10239, 1, "superkingdom", "Viruses"),
        ])
        .expect("valid test tree")
    }
}

/// The per-sample summaries a run can write, each to its own file (`None`: not written).
#[derive(Debug, Clone, Default)]
pub(crate) struct Summaries {
    pub report: Option<std::path::PathBuf>,
    pub abundance: Option<std::path::PathBuf>,
    pub abundance_rank: Option<String>,
    /// The report lists every taxon of the tree, also those without reads.
    pub report_zero_counts: bool,
    pub cami: Option<std::path::PathBuf>,
    pub krona: Option<std::path::PathBuf>,
    pub mpa: Option<std::path::PathBuf>,
}

impl Summaries {
    /// Writes every summary asked for; an error names the file.
    pub(crate) fn write(
        &self,
        tree: &crate::taxonomy::TaxonTree,
        direct: &std::collections::HashMap<crate::taxonomy::TaxId, u64>,
        unclassified: u64,
        sample: &str,
    ) -> Result<(), (std::path::PathBuf, std::io::Error)> {
        type Writer<'a> = Box<dyn Fn(&mut Output) -> std::io::Result<()> + 'a>;
        let jobs: [(&Option<std::path::PathBuf>, Writer); 5] = [
            (&self.report, Box::new(|w| write_kreport(w, tree, direct, unclassified, self.report_zero_counts))),
            (
                &self.abundance,
                Box::new(|w| write_abundance(w, tree, direct, unclassified, self.abundance_rank.as_deref())),
            ),
            (&self.cami, Box::new(|w| write_cami(w, tree, direct, unclassified, sample))),
            (&self.krona, Box::new(|w| write_krona(w, tree, direct, unclassified))),
            (&self.mpa, Box::new(|w| write_mpa(w, tree, direct))),
        ];
        for (path, write) in jobs {
            if let Some(p) = path {
                let err = |e| (p.clone(), e);
                let mut w = create_output(p).map_err(err)?;
                write(&mut w).map_err(err)?;
                w.finish().map_err(err)?;
            }
        }
        Ok(())
    }
}
