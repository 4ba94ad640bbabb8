//! `kmerdb download`: NCBI's taxonomy dump and RefSeq or GenBank assemblies, written as the
//! folder and seqid-to-taxid map that `kmerdb build` takes as they are (issue 34, item 2).
//!
//! - [`fetch`]: HTTP with retries and a doubling backoff, md5 checks, temporary files renamed
//!   when complete;
//! - [`ncbi`]: NCBI's layout (`genomes/{refseq,genbank}/{group}/assembly_summary.txt`, each
//!   assembly's folder with `md5checksums.txt`, `pub/taxonomy/taxdump.tar.gz` and its `.md5`), the
//!   choice of assemblies, the downloads in parallel and what they leave;
//! - [`gtdb`]: GTDB's taxonomy files as an NCBI-format dump with taxids made from names, and each
//!   genome's species, so that assemblies can be downloaded and built with GTDB's taxonomy.
//!
//! Everything is read from a base URL (NCBI's by default), so that a mirror, or the tests' local
//! server, serves the same layout.

pub mod fetch;
pub mod gtdb;
pub mod ncbi;

use std::path::PathBuf;

/// What can go wrong in a download; each names the URL or file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DownloadError {
    #[error("{url}")]
    Http {
        url: String,
        #[source]
        source: Box<ureq::Error>,
    },
    #[error("{url}: the connection broke while reading")]
    Read {
        url: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{url}: the server answered HTTP {status}")]
    Status { url: String, status: u16 },
    #[error("{url}: the file's md5 is {got}, its checksum list says {want}")]
    Checksum { url: String, got: String, want: String },
    #[error("{}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{url}: line {line}: {what}")]
    Format { url: String, line: usize, what: String },
    #[error("{url}: no md5 listed for {file}")]
    NoChecksum { url: String, file: String },
    /// A downloaded genome file that cannot be read as FASTA (it names the file and record).
    #[error(transparent)]
    Input(#[from] crate::input::InputError),
}

impl DownloadError {
    /// Whether trying again may help: a broken or refused connection, a server error (5xx), a
    /// file that arrived damaged. A 4xx answer (the file is not there) and local errors will not
    /// change.
    pub(crate) fn is_transient(&self) -> bool {
        match self {
            DownloadError::Http { .. } | DownloadError::Read { .. } | DownloadError::Checksum { .. } => true,
            DownloadError::Status { status, .. } => *status >= 500 || *status == 429,
            _ => false,
        }
    }
}
