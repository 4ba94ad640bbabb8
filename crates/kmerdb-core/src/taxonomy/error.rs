//! The one error type of the taxonomy stage.
//!
//! Every variant that comes from an input file names that file and, where a line is at fault, its
//! 1-based line number and what was expected there, so that a user can open the file and fix it.
//! I/O errors keep the underlying `std::io::Error` as their `source` (print the error chain, e.g.
//! with `{:#}` in anyhow, to see it).

use std::path::PathBuf;

use super::TaxId;

/// Everything that can go wrong while loading a taxonomy, a sequence-id map, or building a tree.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TaxonomyError {
    /// A file could not be opened or read (this includes a corrupt gzip stream).
    #[error("cannot read {}", path.display())]
    Io {
        /// The file being read.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },

    /// A line of an input file does not have the expected shape.
    #[error("{} line {line}: {reason}", path.display())]
    Malformed {
        /// The file being read.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What was expected and what was found.
        reason: String,
    },

    /// A required dump file is absent from the taxonomy directory.
    #[error("no {name} or {name}.gz in {}", dir.display())]
    MissingFile {
        /// The directory searched.
        dir: PathBuf,
        /// The plain file name looked for, e.g. `nodes.dmp`.
        name: String,
    },

    /// The same sequence id is given two different taxids.
    #[error(
        "sequence id {id:?} has taxid {first_taxid} in {} line {first_line} \
         but taxid {second_taxid} in {} line {second_line}",
        first_path.display(),
        second_path.display()
    )]
    ConflictingTaxid {
        /// The sequence id.
        id: String,
        /// The taxid seen first.
        first_taxid: TaxId,
        /// Where it was seen.
        first_path: PathBuf,
        /// Its line.
        first_line: usize,
        /// The different taxid seen later.
        second_taxid: TaxId,
        /// Where it was seen.
        second_path: PathBuf,
        /// Its line.
        second_line: usize,
    },

    /// A taxid was asked for that the taxonomy does not hold.
    #[error("taxid {taxid} is not in the taxonomy")]
    UnknownTaxid {
        /// The taxid.
        taxid: TaxId,
    },

    /// A tree has no root: taxid 1 whose parent is 1.
    #[error("taxonomy tree has no root (taxid 1 with parent 1)")]
    MissingRoot,

    /// A taxon other than 1 is its own parent.
    #[error("taxid {taxid} is its own parent, but only the root (taxid 1) may be")]
    SecondRoot {
        /// The offending taxid.
        taxid: TaxId,
    },

    /// A name or rank with a tab or a line break would break every tab-separated report.
    #[error("taxid {taxid}'s name or rank holds a tab or a line break, which would break the tab-separated reports")]
    UnprintableName {
        /// The offending taxid.
        taxid: TaxId,
    },

    /// Taxid 0 is reserved for "unclassified" and cannot be a taxon.
    #[error("taxid 0 is reserved for unclassified and cannot be a taxon")]
    ReservedTaxid,

    /// Two taxa share a taxid.
    #[error("taxid {taxid} appears more than once in the tree")]
    DuplicateTaxid {
        /// The repeated taxid.
        taxid: TaxId,
    },

    /// A taxon's parent is not in the tree.
    #[error("taxid {taxid} has parent {parent}, which is not in the tree")]
    DanglingParent {
        /// The child.
        taxid: TaxId,
        /// The missing parent.
        parent: TaxId,
    },

    /// Following parents from a taxon never reaches the root.
    #[error("taxid {taxid} does not reach the root: its parents form a cycle")]
    Cycle {
        /// A taxid on (or leading into) the cycle.
        taxid: TaxId,
    },
}

impl TaxonomyError {
    /// Shorthand for [`TaxonomyError::Io`].
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        TaxonomyError::Io { path: path.into(), source }
    }

    /// Shorthand for [`TaxonomyError::Malformed`].
    pub(crate) fn malformed(path: impl Into<PathBuf>, line: usize, reason: impl Into<String>) -> Self {
        TaxonomyError::Malformed { path: path.into(), line, reason: reason.into() }
    }
}
