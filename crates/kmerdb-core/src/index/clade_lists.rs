//! The clade lists section: every clade feature (one in more locations than the cap, which the
//! key index stores as its targets' LCA, see `index::locations`) with all of its locations.
//! Classification never reads it; `kmerdb update` does, because removing genomes can bring such a
//! feature back under the cap and change its LCA, which only its whole list can tell.
//!
//! ```text
//! u64          features
//! u64          locations
//! zstd frames  per feature, in shard order then ascending feature:
//!                feature (u32 LE), count (LEB128), then each location as LEB128 deltas from the
//!                one before (the first from target 0, window 0): the target's, then the window's
//!                (zigzag, as a list's next target starts its windows again)
//! ```
//! The features are cut into runs of at least `FRAME_LOCATIONS` locations (the last run may
//! hold fewer), each compressed into a frame of its own (format 13: before, one frame, which took
//! 24 s on one thread for the 634 M clade locations of a 50 Gbp collection), by
//! `SectionEncoder` as the build writes its shards. The runs depend on the lists only, so the
//! bytes are the same whatever the thread count; a collection with fewer clade locations than one
//! run has one frame, as before.
//! Locations are independent of the index's packing (an update may change it) and delta-coded:
//! the strains of a species are numbered side by side and share windows, so most deltas are one
//! byte, and the compressor takes the long runs of equal ones. A strain-dense collection's core
//! genome is exactly what goes over the cap, so this section would otherwise be most of the index.

use crate::sketch::Feature;

/// A location independent of the index's packing: `target << 32 | window`.
pub fn location(target: u32, window: u32) -> u64 {
    (target as u64) << 32 | window as u64
}

/// The (target, window) of a [`location`].
pub fn target_window(location: u64) -> (u32, u32) {
    ((location >> 32) as u32, location as u32)
}

/// zstd's level for the section: the default, deterministic for a given library version.
const ZSTD_LEVEL: i32 = 3;

/// A frame holds the whole lists of its features, at least this many locations of them (but the
/// last frame's): some 10 MB before compression, 20 ms of zstd.
pub(crate) const FRAME_LOCATIONS: usize = 1 << 22;

/// Clade features with their locations, in the order they were added.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CladeLists {
    features: Vec<[u32; 2]>,
    locations: Vec<u64>,
}

impl CladeLists {
    /// Adds `feature` with its ascending [`location`]s.
    pub fn push(&mut self, feature: Feature, locations: impl IntoIterator<Item = u64>) {
        let before = self.locations.len();
        self.locations.extend(locations);
        let count = self.locations.len() - before;
        debug_assert!(self.locations[before..].is_sorted(), "a clade's list is sorted");
        self.features.push([feature, u32::try_from(count).expect("a feature has fewer than 2^32 locations")]);
    }

    /// Adds the lists of `other` after these.
    pub fn append(&mut self, mut other: CladeLists) {
        self.features.append(&mut other.features);
        self.locations.append(&mut other.locations);
    }

    /// Clade features.
    pub fn len(&self) -> usize {
        self.features.len()
    }

    pub fn is_empty(&self) -> bool {
        self.features.is_empty()
    }

    /// Locations of all clade features.
    pub fn locations(&self) -> usize {
        self.locations.len()
    }

    /// Each clade feature with its [`location`]s, in stored order.
    pub fn iter(&self) -> impl Iterator<Item = (Feature, &[u64])> + '_ {
        let mut at = 0;
        self.features.iter().map(move |&[feature, count]| {
            let list = &self.locations[at..at + count as usize];
            at += count as usize;
            (feature, list)
        })
    }

    /// The section's bytes, whole (the definition [`SectionEncoder`] is tested against); the
    /// frames are compressed on the current thread pool.
    #[cfg(test)]
    pub(crate) fn encode(&self) -> Vec<u8> {
        self.encode_in_frames(FRAME_LOCATIONS)
    }

    /// [`Self::encode`] with frames of at least `frame_locations` locations.
    #[cfg(test)]
    fn encode_in_frames(&self, frame_locations: usize) -> Vec<u8> {
        use rayon::prelude::*;
        let frames: Vec<Vec<u8>> = self
            .runs(frame_locations)
            .into_par_iter()
            .map(|(features, first_location)| compress_run(&self.features[features], &self.locations[first_location..]))
            .collect();
        let mut out = Vec::with_capacity(16 + frames.iter().map(Vec::len).sum::<usize>());
        out.extend_from_slice(&(self.features.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.locations.len() as u64).to_le_bytes());
        for f in frames {
            out.extend(f);
        }
        out
    }

    /// The runs of features each frame holds, with the index of each run's first location: at
    /// least one run (an empty section has one empty frame).
    #[cfg(test)]
    fn runs(&self, frame_locations: usize) -> Vec<(std::ops::Range<usize>, usize)> {
        if self.features.is_empty() {
            return vec![(0..0, 0)];
        }
        let mut runs = Vec::new();
        let (mut start, mut first_location, mut in_run) = (0, 0, 0);
        for (i, &[_, count]) in self.features.iter().enumerate() {
            in_run += count as usize;
            if in_run >= frame_locations || i + 1 == self.features.len() {
                runs.push((start..i + 1, first_location));
                (start, first_location, in_run) = (i + 1, first_location + in_run, 0);
            }
        }
        runs
    }

    /// The (features, locations) a section says it holds, read without decompressing it.
    pub fn counts(bytes: &[u8]) -> Result<(u64, u64), String> {
        let count = |at: usize| -> Result<u64, String> {
            let b =
                bytes.get(at..at + 8).ok_or_else(|| format!("it has {} bytes, fewer than its counts", bytes.len()))?;
            Ok(u64::from_le_bytes(b.try_into().expect("8 bytes")))
        };
        Ok((count(0)?, count(8)?))
    }

    /// Reads a section, checking that what it holds adds up; the error says what does not. The
    /// frames are decompressed and read on the current thread pool.
    pub fn decode(bytes: &[u8]) -> Result<Self, String> {
        use rayon::prelude::*;
        let (n_features, n_locations) = Self::counts(bytes)?;
        // A feature takes 5 to 14 bytes before its locations, a location 2 to 15: the counts
        // bound what the frames may hold, and the frames' own size bounds the counts (zstd's
        // blocks expand at most some 43,000 times), so a damaged count allocates nothing large.
        let frames = &bytes[16..];
        let room = n_features.saturating_mul(14).saturating_add(n_locations.saturating_mul(15));
        let limit = room.min((frames.len() as u64).saturating_mul(MAX_RATIO));
        // Each frame decompressed and read at once (its bytes freed as soon as they are read).
        let read: Vec<(u64, CladeLists)> = split_frames(frames, limit)?
            .into_par_iter()
            .map(|(f, size)| decompress(f, size).and_then(|raw| Ok((raw.len() as u64, read_lists(&raw, n_locations)?))))
            .collect::<Result<_, _>>()?;
        let raw_len: u64 = read.iter().map(|(len, _)| len).sum();
        if n_features > raw_len / 5 || n_locations > raw_len / 2 {
            return Err(format!("its counts ({n_features} features, {n_locations} locations) exceed what it holds"));
        }
        let parts = read.into_iter().map(|(_, part)| part);
        let mut out = CladeLists {
            features: Vec::with_capacity(n_features as usize),
            locations: Vec::with_capacity(n_locations as usize),
        };
        // Each list within what the counts leave, in stream order (as one reader would find it).
        let mut so_far = 0u64;
        for part in parts {
            for &[feature, len] in &part.features {
                if len as u64 > n_locations.saturating_sub(so_far) {
                    return Err(format!("feature {feature:#010x} has {len} locations, which its counts do not allow"));
                }
                so_far += len as u64;
            }
            out.append(part);
        }
        if (out.features.len() as u64, out.locations.len() as u64) != (n_features, n_locations) {
            return Err(format!(
                "it holds {} features and {} locations, its counts say {n_features} and {n_locations}",
                out.features.len(),
                out.locations.len()
            ));
        }
        Ok(out)
    }
}

/// The features and lists of one frame's bytes; a list longer than `n_locations` (the section's
/// count) is refused at once.
fn read_lists(raw: &[u8], n_locations: u64) -> Result<CladeLists, String> {
    let mut out = CladeLists::default();
    let mut r = Reader { bytes: raw, at: 0 };
    while r.at < raw.len() {
        let feature = r.u32()?;
        let len = r.leb128()?;
        if len == 0 || len > n_locations {
            return Err(format!("feature {feature:#010x} has {len} locations, which its counts do not allow"));
        }
        let mut before = (0u32, 0u32);
        for _ in 0..len {
            let t = u32::try_from(before.0 as u64 + r.leb128()?).map_err(|_| "a target past 2^32".to_string())?;
            let w = before.1 as i64 + unzigzag(r.leb128()?);
            let w = u32::try_from(w).map_err(|_| "a window outside 0..2^32".to_string())?;
            let l = location(t, w);
            if before != (0, 0) && l <= location(before.0, before.1) {
                return Err(format!("feature {feature:#010x}'s locations are not ascending"));
            }
            out.locations.push(l);
            before = (t, w);
        }
        out.features.push([feature, len as u32]);
    }
    Ok(out)
}

/// The section's frames, each with the bytes it says it decompresses to, all of them within
/// `limit` bytes (so nothing larger is allocated). A frame that does not say (none of kmerdb's)
/// may take what the others leave.
fn split_frames(mut frames: &[u8], limit: u64) -> Result<Vec<(&[u8], u64)>, String> {
    let failed = |e: String| format!("its lists cannot be decompressed: {e}");
    let mut out = Vec::new();
    let mut declared = 0u64;
    while !frames.is_empty() {
        let len = zstd::zstd_safe::find_frame_compressed_size(frames)
            .map_err(|code| failed(zstd::zstd_safe::get_error_name(code).to_string()))?;
        let (frame, rest) = frames.split_at(len);
        let size = zstd::zstd_safe::get_frame_content_size(frame).map_err(|e| failed(format!("{e:?}")))?;
        declared = declared.saturating_add(size.unwrap_or(0));
        out.push((frame, size));
        frames = rest;
    }
    if declared > limit {
        return Err("its lists hold more than its counts allow".into());
    }
    let left = limit - declared;
    Ok(out.into_iter().map(|(f, size)| (f, size.unwrap_or(left))).collect())
}

/// The section encoded as its lists arrive in order (shard after shard, as a build writes them):
/// each run of features is compressed on threads of the encoder's own as soon as it is closed, so
/// that the build's end has only the last run left (a 50 Gbp build's 634 M clade locations took
/// 1.2 s on 32 threads after the shards). Gives [`CladeLists::encode`]'s bytes: a run closes at
/// the same feature either way, as it depends on the lists before it only.
#[derive(Debug)]
pub(crate) struct SectionEncoder {
    /// The run not closed yet.
    open: CladeLists,
    features: u64,
    locations: u64,
    /// Each closed run's frame, in order, as its compression ends.
    frames: Vec<std::sync::mpsc::Receiver<Vec<u8>>>,
    /// Made when the first run closes: small sections never start a thread.
    pool: Option<rayon::ThreadPool>,
    threads: usize,
    frame_locations: usize,
}

impl SectionEncoder {
    /// An encoder compressing on up to `threads` threads of its own.
    pub(crate) fn new(threads: usize) -> Self {
        Self::with_frames(threads, FRAME_LOCATIONS)
    }

    fn with_frames(threads: usize, frame_locations: usize) -> Self {
        SectionEncoder {
            open: CladeLists::default(),
            features: 0,
            locations: 0,
            frames: Vec::new(),
            pool: None,
            threads: threads.max(1),
            frame_locations,
        }
    }

    /// Adds `lists` after those added before, compressing each run they close. A run wholly
    /// within `lists` is compressed where it lies; only a run begun before them is copied.
    pub(crate) fn append(&mut self, lists: CladeLists) {
        self.features += lists.features.len() as u64;
        self.locations += lists.locations.len() as u64;
        let lists = std::sync::Arc::new(lists);
        // `lists` up to (f0, l0) is in closed runs; (f, l) is where the run being looked at ends.
        let (mut f0, mut l0, mut l) = (0, 0, 0);
        let mut in_run = self.open.locations.len();
        for (f, &[_, count]) in lists.features.iter().enumerate() {
            (l, in_run) = (l + count as usize, in_run + count as usize);
            if in_run < self.frame_locations {
                continue;
            }
            if self.open.features.is_empty() {
                self.compress(lists.clone(), f0..f + 1, l0..l);
            } else {
                self.open.features.extend_from_slice(&lists.features[f0..f + 1]);
                self.open.locations.extend_from_slice(&lists.locations[l0..l]);
                let run = std::mem::take(&mut self.open);
                let (features, locations) = (0..run.features.len(), 0..run.locations.len());
                self.compress(std::sync::Arc::new(run), features, locations);
            }
            (f0, l0, in_run) = (f + 1, l, 0);
        }
        self.open.features.extend_from_slice(&lists.features[f0..]);
        self.open.locations.extend_from_slice(&lists.locations[l0..]);
    }

    /// Compresses the run of `lists`' `features` with their `locations` on the encoder's threads.
    fn compress(
        &mut self,
        lists: std::sync::Arc<CladeLists>,
        features: std::ops::Range<usize>,
        locations: std::ops::Range<usize>,
    ) {
        let (tx, rx) = std::sync::mpsc::channel();
        self.frames.push(rx);
        let job = move || {
            let _ = tx.send(compress_run(&lists.features[features], &lists.locations[locations]));
        };
        if self.pool.is_none() {
            let threads = self.threads;
            let named = |i| format!("kmerdb-clade-lists-{i}");
            self.pool = rayon::ThreadPoolBuilder::new().num_threads(threads).thread_name(named).build().ok();
        }
        match &self.pool {
            Some(pool) => pool.spawn(job),
            // No threads to be had: compressed here, the same bytes.
            None => job(),
        }
    }

    /// The section's bytes: the last run compressed here, then every frame in order.
    pub(crate) fn finish(mut self) -> Vec<u8> {
        let last = std::mem::take(&mut self.open);
        let last = (!last.features.is_empty() || self.frames.is_empty())
            .then(|| compress_run(&last.features, &last.locations));
        let mut frames: Vec<Vec<u8>> =
            self.frames.iter().map(|rx| rx.recv().expect("a compression job sends its frame")).collect();
        frames.extend(last);
        let mut out = Vec::with_capacity(16 + frames.iter().map(Vec::len).sum::<usize>());
        out.extend_from_slice(&self.features.to_le_bytes());
        out.extend_from_slice(&self.locations.to_le_bytes());
        for f in frames {
            out.extend(f);
        }
        out
    }
}

/// More than zstd can expand a frame by (its largest block, 128 KiB, from a 3-byte header).
const MAX_RATIO: u64 = 1 << 16;

/// A run of features with their lists (`locations` from the run's first), as one zstd frame.
fn compress_run(features: &[[u32; 2]], locations: &[u64]) -> Vec<u8> {
    let in_run: usize = features.iter().map(|&[_, count]| count as usize).sum();
    let mut raw = Vec::with_capacity(features.len() * 8 + in_run * 2);
    let mut at = 0;
    for &[feature, count] in features {
        raw.extend_from_slice(&feature.to_le_bytes());
        leb128(&mut raw, count as u64);
        let mut before = (0u32, 0u32);
        for &l in &locations[at..at + count as usize] {
            let (t, w) = target_window(l);
            leb128(&mut raw, (t - before.0) as u64);
            leb128(&mut raw, zigzag(w as i64 - before.1 as i64));
            before = (t, w);
        }
        at += count as usize;
    }
    zstd::bulk::compress(&raw, ZSTD_LEVEL).expect("zstd compresses any bytes in memory")
}

/// One frame's bytes, at most `limit` of them (read as they come: nothing is allocated for more).
fn decompress(frame: &[u8], limit: u64) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let failed = |e: std::io::Error| format!("its lists cannot be decompressed: {e}");
    let mut raw = Vec::new();
    let mut decoder = zstd::stream::read::Decoder::new(frame).map_err(failed)?.single_frame();
    (&mut decoder).take(limit).read_to_end(&mut raw).map_err(failed)?;
    if raw.len() as u64 == limit && decoder.read(&mut [0u8]).map_err(failed)? > 0 {
        return Err("its lists hold more than its counts allow".into());
    }
    Ok(raw)
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    (v >> 1) as i64 ^ -((v & 1) as i64)
}

fn leb128(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// The decompressed lists, read in order.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn u32(&mut self) -> Result<u32, String> {
        let b = self.bytes.get(self.at..self.at + 4).ok_or("its lists end inside a feature")?;
        self.at += 4;
        Ok(u32::from_le_bytes(b.try_into().expect("4 bytes")))
    }

    fn leb128(&mut self) -> Result<u64, String> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *self.bytes.get(self.at).ok_or("its lists end inside a number")?;
            self.at += 1;
            v |= ((b & 0x7f) as u64) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err("a number longer than 64 bits".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What is pushed is what is read back, runs of neighbouring strains cost about nothing, and a
    /// section whose counts do not add up is refused.
    #[test]
    fn lists_round_trip_compactly_and_bad_counts_are_refused() {
        let mut lists = CladeLists::default();
        lists.push(7, [location(0, 1), location(0, 5), location(3, 2)]);
        let mut more = CladeLists::default();
        more.push(2, [location(u32::MAX, u32::MAX)]);
        more.push(9, (0..300).map(|t| location(t, 1000 + t % 2)));
        lists.append(more);
        let bytes = lists.encode();
        let read = CladeLists::decode(&bytes).unwrap();
        assert_eq!(read, lists);
        let got: Vec<(u32, Vec<u64>)> = read.iter().map(|(f, l)| (f, l.to_vec())).collect();
        assert_eq!(got[0], (7, vec![location(0, 1), location(0, 5), location(3, 2)]));
        assert_eq!(got[1], (2, vec![u64::MAX]));
        assert_eq!((read.len(), read.locations()), (3, 304));
        assert!(bytes.len() < 100, "300 neighbouring strains at one window: {} bytes", bytes.len());
        assert_eq!(target_window(location(3, 2)), (3, 2));
        assert!(CladeLists::decode(&CladeLists::default().encode()).unwrap().is_empty());
        let mut wrong = bytes.clone();
        wrong[8] -= 1;
        assert!(CladeLists::decode(&wrong).unwrap_err().contains("not allow"), "one location fewer in the counts");
        let mut wrong = bytes.clone();
        wrong[8] += 1;
        assert!(CladeLists::decode(&wrong).unwrap_err().contains("counts say"), "one location more in the counts");
        let mut wrong = bytes.clone();
        wrong[0] = 2;
        assert!(CladeLists::decode(&wrong).unwrap_err().contains("counts say"));
        assert!(CladeLists::decode(&bytes[..12]).unwrap_err().contains("fewer than its counts"));
        assert!(CladeLists::decode(&bytes[..bytes.len() - 1]).unwrap_err().contains("decompressed"));
        let mut huge = bytes.clone();
        huge[..8].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(CladeLists::decode(&huge).unwrap_err().contains("exceed"));
    }

    /// Lists given shard by shard to the encoder, closing runs as they come, give the bytes of
    /// the whole section's encoding, with runs closing inside a shard's lists and at their end,
    /// and for an empty section.
    #[test]
    fn lists_encoded_as_they_arrive_give_the_sections_bytes() {
        let mut all = CladeLists::default();
        let mut shards = Vec::new();
        for shard in 0..7u32 {
            let mut lists = CladeLists::default();
            for f in 0..(shard * 5 % 11) {
                let n = (f * 13 + shard) % 40 + 1;
                let locations: Vec<u64> = (0..n).map(|i| location(i * 3 + shard, (i * 7 + f) % 100)).collect();
                lists.push(shard << 16 | f, locations.iter().copied());
                all.push(shard << 16 | f, locations);
            }
            shards.push(lists);
        }
        for frame_locations in [1, 7, 40, 100, 1 << 20] {
            for threads in [1, 3] {
                let mut encoder = SectionEncoder::with_frames(threads, frame_locations);
                for lists in shards.iter().cloned() {
                    encoder.append(lists);
                }
                assert_eq!(encoder.finish(), all.encode_in_frames(frame_locations), "frames of {frame_locations}");
            }
        }
        assert_eq!(SectionEncoder::new(2).finish(), CladeLists::default().encode());
    }

    /// Lists cut into several frames read back whole, with the same bytes on one thread as on
    /// four; a frame left out is missed.
    #[test]
    fn lists_in_several_frames_read_back_with_bytes_independent_of_threads() {
        let mut lists = CladeLists::default();
        for f in 0..50u32 {
            lists.push(f * 3, (0..(f % 7 + 1) * 40).map(|i| location(i / 3, f + i % 3)));
        }
        let pool = |n| rayon::ThreadPoolBuilder::new().num_threads(n).build().unwrap();
        let one = pool(1).install(|| lists.encode_in_frames(100));
        let four = pool(4).install(|| lists.encode_in_frames(100));
        assert_eq!(one, four);
        assert!(lists.runs(100).len() > 10, "{} runs", lists.runs(100).len());
        assert_eq!(CladeLists::decode(&one).unwrap(), lists);
        assert_eq!(lists.runs(usize::MAX).len(), 1);
        assert_eq!(CladeLists::decode(&lists.encode_in_frames(usize::MAX)).unwrap(), lists);
        // The section without its last frame.
        let last = lists.runs(100).last().unwrap().clone();
        let tail = compress_run(&lists.features[last.0.clone()], &lists.locations[last.1..]);
        assert!(CladeLists::decode(&one[..one.len() - tail.len()]).unwrap_err().contains("counts say"));
        // Frames that say they hold more than the counts allow are refused before they are read.
        let mut small = one.clone();
        small[..8].copy_from_slice(&1u64.to_le_bytes());
        small[8..16].copy_from_slice(&1u64.to_le_bytes());
        assert!(CladeLists::decode(&small).unwrap_err().contains("more than its counts allow"));
        // A damaged frame in the middle.
        let mut damaged = one.clone();
        damaged[16 + 5] ^= 0xff;
        assert!(CladeLists::decode(&damaged).is_err());
    }
}
