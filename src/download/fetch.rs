//! HTTP downloads that survive what servers and networks do: each request retried with a
//! doubling backoff on a dropped connection, a server error or a checksum that does not match;
//! files written as kmerdb writes every output (a temporary file beside the destination, removed
//! on Ctrl-C, renamed only once complete and checked: `temp_files`), so that an interrupted run
//! leaves nothing that a rerun would take for a finished file.

use super::DownloadError;
use md5::{Digest, Md5};
use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

/// A client with its retry policy.
pub struct Fetcher {
    agent: ureq::Agent,
    attempts: u32,
    backoff: Duration,
}

impl Fetcher {
    /// `attempts` tries per request (at least one), waiting `backoff`, then twice that, and so on,
    /// between them.
    pub fn new(attempts: u32, backoff: Duration) -> Self {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(Duration::from_secs(30)))
            .timeout_per_read(Some(Duration::from_secs(120)))
            .user_agent(concat!("kmerdb/", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        Self { agent, attempts: attempts.max(1), backoff }
    }

    /// The body of `url` as text (summaries and checksum lists).
    pub fn text(&self, url: &str) -> Result<String, DownloadError> {
        self.retried(|| {
            let mut text = String::new();
            self.get(url)?
                .read_to_string(&mut text)
                .map_err(|e| DownloadError::Read { url: url.to_owned(), source: e })?;
            Ok(text)
        })
    }

    /// Downloads `url` to `dest` (through a temporary file beside it); with `md5`, the file must
    /// have that checksum (lowercase hex) or it is fetched again, and after the last attempt left
    /// out. Returns the file's size. The caller sweeps `dest`'s folder of stale temporary files
    /// once (`temp_files::remove_stale_in`), not every file.
    pub fn file(&self, url: &str, dest: &Path, md5: Option<&str>) -> Result<u64, DownloadError> {
        let io = |source| DownloadError::Io { path: dest.to_owned(), source };
        let (temp, size) = self.retried(|| {
            let temp = crate::temp_files::create_beside_unswept(dest).map_err(io)?;
            let mut body = self.get(url)?;
            let mut out = std::io::BufWriter::new(temp.as_file());
            let mut hasher = Md5::new();
            let mut buf = vec![0u8; 1 << 16];
            let mut size = 0u64;
            loop {
                let n = body.read(&mut buf).map_err(|e| DownloadError::Read { url: url.to_owned(), source: e })?;
                if n == 0 {
                    break;
                }
                hasher.update(&buf[..n]);
                out.write_all(&buf[..n]).map_err(io)?;
                size += n as u64;
            }
            out.flush().map_err(io)?;
            drop(out);
            let got = hex(&hasher.finalize());
            match md5 {
                Some(want) if !want.eq_ignore_ascii_case(&got) => {
                    Err(DownloadError::Checksum { url: url.to_owned(), got, want: want.to_owned() })
                }
                _ => Ok((temp, size)),
            }
        })?;
        temp.persist(dest).map_err(io)?;
        Ok(size)
    }

    /// The response body of a GET of `url`, if the server answered 200.
    fn get(&self, url: &str) -> Result<impl Read, DownloadError> {
        let response =
            self.agent.get(url).call().map_err(|e| DownloadError::Http { url: url.to_owned(), source: Box::new(e) })?;
        match response.status().as_u16() {
            200 => Ok(response.into_body().into_reader()),
            status => Err(DownloadError::Status { url: url.to_owned(), status }),
        }
    }

    /// `attempt` until it succeeds, fails for good (a 4xx answer: the file is not there), or
    /// has been tried `attempts` times.
    fn retried<T>(&self, mut attempt: impl FnMut() -> Result<T, DownloadError>) -> Result<T, DownloadError> {
        let mut wait = self.backoff;
        for tried in 1.. {
            match attempt() {
                Ok(v) => return Ok(v),
                Err(e) if tried < self.attempts && e.is_transient() => {
                    log::debug!("{}; trying again in {:.1} s", crate::errors::chain(&e), wait.as_secs_f64());
                    std::thread::sleep(wait);
                    wait *= 2;
                }
                Err(e) => return Err(e),
            }
        }
        unreachable!("the loop returns")
    }
}

/// Writes `bytes` to `path` through a temporary file beside it, renamed when complete.
pub(crate) fn write_file(path: &Path, bytes: &[u8]) -> Result<(), DownloadError> {
    let io = |source| DownloadError::Io { path: path.to_owned(), source };
    let temp = crate::temp_files::create_beside(path).map_err(io)?;
    temp.as_file().write_all(bytes).map_err(io)?;
    temp.persist(path).map_err(io)
}

/// The text of the file at `path`, gunzipped when it starts with gzip's magic bytes.
pub fn read_text(path: &Path) -> Result<String, DownloadError> {
    let io = |source| DownloadError::Io { path: path.to_owned(), source };
    let bytes = std::fs::read(path).map_err(io)?;
    let mut text = String::new();
    if bytes.starts_with(&[0x1f, 0x8b]) {
        flate2::read::MultiGzDecoder::new(&bytes[..]).read_to_string(&mut text).map_err(io)?;
    } else {
        text = String::from_utf8(bytes).map_err(|e| io(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))?;
    }
    Ok(text)
}

/// The md5 of the file at `path`, lowercase hex.
pub fn md5_of_file(path: &Path) -> Result<String, DownloadError> {
    let io = |source| DownloadError::Io { path: path.to_owned(), source };
    let mut file = std::fs::File::open(path).map_err(io)?;
    let mut hasher = Md5::new();
    std::io::copy(&mut file, &mut hasher).map_err(io)?;
    Ok(hex(&hasher.finalize()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn md5_is_lowercase_hex_of_the_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"abc").unwrap();
        // RFC 1321's test vector.
        assert_eq!(md5_of_file(&path).unwrap(), "900150983cd24fb0d6963f7d28e17f72");
    }
}
