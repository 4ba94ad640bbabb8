//! NCBI taxonomy: loading dumps, resolving sequence taxids, pruning, lowest common ancestors.
//!
//! The taxonomy stage has two halves with very different sizes and lifetimes:
//!
//! * At build time, [`NcbiTaxonomy`] holds the whole NCBI dump (~2.6 M taxa, loaded from
//!   `nodes.dmp`/`names.dmp`/`merged.dmp` in well under a second or two), and [`SeqIdMap`] plus
//!   [`taxid_from_header`] give each reference sequence its taxid. [`NcbiTaxonomy::resolve`] maps
//!   retired taxids to current ones, and [`NcbiTaxonomy::prune`] keeps only the lineages of the
//!   taxa actually referenced.
//! * The pruned result, a list of [`Taxon`] records, becomes a [`TaxonTree`]: small, validated,
//!   stored in the index through serde, and queried per read ([`TaxonTree::lca`]) and per report
//!   line ([`TaxonTree::kreport_rank_code`]).
//!
//! Conventions shared by both: taxid 0 ([`UNCLASSIFIED`]) is never a taxon and means "no taxon";
//! the root is taxid 1 ([`ROOT`]) and is its own parent; every other taxon reaches the root.
//! Every input error names its file and line ([`TaxonomyError`]).

mod error;
mod index;
mod lines;
mod ncbi;
mod seqmap;
mod tree;

pub use error::TaxonomyError;
pub use index::{TaxidMap, U32Hasher};
pub use ncbi::NcbiTaxonomy;
pub use seqmap::{SeqIdMap, taxid_from_header};
pub use tree::{Taxon, TaxonTree};

/// An NCBI taxonomy identifier.
pub type TaxId = u32;

/// The root of every taxonomy; its parent is itself.
pub const ROOT: TaxId = 1;

/// Taxid 0: "no taxon" (an unclassified read, or no hit yet when folding LCAs).
pub const UNCLASSIFIED: TaxId = 0;
