//! What the unit tests share: gzip made in memory and written as fixtures.

use std::io::Write;
use std::path::{Path, PathBuf};

/// `data` as one gzip member (default level).
pub(crate) fn gzip(data: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(data).expect("gzip in memory");
    enc.finish().expect("gzip in memory")
}

/// Writes `text` gzipped as `dir/name` and returns the path.
pub(crate) fn write_gz(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, gzip(text.as_bytes())).expect("write fixture");
    path
}
