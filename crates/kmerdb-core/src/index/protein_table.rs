//! The amino-acid table (the index's `protein` section, made by `kmerdb build --protein`; the
//! stage that reads it is `protein`): the distinct k-mers in ascending order, each with the
//! ascending ids of the targets that hold it; k-mers held by more than `cap` targets say little
//! and are left out of the lookups, but kept with their lists after them (as the DNA's clade
//! lists keep what `update` needs), so that `update` can bring one back under the cap, or keep it
//! out, exactly as a fresh build would. Little-endian, cast in place from the mapped file:
//!
//! ```text
//! ProteinParams (6 x u32)
//! looked up:  keys: u32 x n, starts: u32 x (n + 1), targets: u32 x starts[n]
//! over cap:   keys: u32 x d, starts: u32 x (d + 1), targets: u32 x starts[d]
//! ```

/// Settings of the amino-acid k-mers, stored at the start of the section.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ProteinParams {
    /// Amino acids per k-mer (at most 7).
    pub k: u32,
    /// One k-mer in `sample` is kept (by hash).
    pub sample: u32,
    /// Shortest stop-free stretch of a reference that is indexed.
    pub min_orf: u32,
    /// K-mers held by more targets than this are left out.
    pub cap: u32,
    /// Distinct k-mers in the table, looked up.
    pub keys: u32,
    /// Distinct k-mers over the cap, kept for `update` only.
    pub over_cap: u32,
}

impl ProteinParams {
    /// The defaults, measured on the held-out sets (bench/results/HISTORY.md, "The amino-acid stage"): a
    /// minimum ORF of 100 amino acids keeps most of GC-rich genomes' non-coding frames out (with
    /// 30, reads of *M. tuberculosis* matched them in *Klebsiella*); keeping every k-mer instead
    /// of half gained nothing measurable for 1.6x the section.
    pub const DEFAULT: ProteinParams = ProteinParams { k: 7, sample: 2, min_orf: 100, cap: 64, keys: 0, over_cap: 0 };

    /// Whether the k-mer `code` is one of the sampled ones.
    #[inline]
    pub fn keeps(&self, code: u32) -> bool {
        self.sample <= 1 || crate::sketch::fmix64(u64::from(code) ^ 0x9e37_79b9_7f4a_7c15) % u64::from(self.sample) == 0
    }
}

/// Keys with their target lists, being encoded: keys, list starts (one more than keys), targets.
struct Lists {
    keys: Vec<u32>,
    starts: Vec<u32>,
    targets: Vec<u32>,
}

impl Lists {
    fn new() -> Self {
        Lists { keys: Vec::new(), starts: vec![0], targets: Vec::new() }
    }

    /// Adds one key's run of (key, target) pairs.
    fn push(&mut self, run: &[(u32, u32)]) {
        self.keys.push(run[0].0);
        self.targets.extend(run.iter().map(|p| p.1));
        self.starts.push(self.targets.len() as u32);
    }

    fn append_to(&self, bytes: &mut Vec<u8>) {
        for part in [&self.keys, &self.starts, &self.targets] {
            bytes.extend_from_slice(bytemuck::cast_slice(part));
        }
    }
}

/// The table's bytes (module documentation) from (k-mer, target) pairs in any order: the same
/// pairs give the same bytes, however they were gathered (a build, or an update).
pub fn encode_table(mut pairs: Vec<(u32, u32)>, params: ProteinParams) -> Vec<u8> {
    pairs.sort_unstable();
    pairs.dedup();
    let (mut kept, mut over) = (Lists::new(), Lists::new());
    for run in pairs.chunk_by(|a, b| a.0 == b.0) {
        if run.len() > params.cap as usize { over.push(run) } else { kept.push(run) }
    }
    let params = ProteinParams { keys: kept.keys.len() as u32, over_cap: over.keys.len() as u32, ..params };
    let mut bytes = bytemuck::bytes_of(&params).to_vec();
    kept.append_to(&mut bytes);
    over.append_to(&mut bytes);
    bytes
}

/// The `protein` section of a mapped index: its lengths checked when parsed, the rest by
/// [`ProteinTable::check`].
#[derive(Debug, Clone, Copy)]
pub struct ProteinTable<'a> {
    pub params: ProteinParams,
    /// The k-mers looked up.
    kept: ListsView<'a>,
    /// The k-mers over the cap (not looked up; for `update`).
    over: ListsView<'a>,
}

/// Keys with their target lists, as stored ([`Lists`]).
#[derive(Debug, Clone, Copy)]
struct ListsView<'a> {
    keys: &'a [u32],
    starts: &'a [u32],
    targets: &'a [u32],
}

impl<'a> ListsView<'a> {
    /// Splits `words` into `n` keys, `n + 1` list starts and the lists' targets; returns the view
    /// and the words after it.
    fn split(words: &'a [u32], n: usize) -> Result<(Self, &'a [u32]), String> {
        if words.len() < 2 * n + 1 {
            return Err(format!("it is too short for {n} keys"));
        }
        let (keys, rest) = words.split_at(n);
        let (starts, rest) = rest.split_at(n + 1);
        let len = starts[n] as usize;
        if len > rest.len() {
            return Err(format!("its lists should hold {len} targets, {} words are left", rest.len()));
        }
        let (targets, rest) = rest.split_at(len);
        Ok((ListsView { keys, starts, targets }, rest))
    }

    /// Key `i`'s targets; empty where a damaged table's starts make no range.
    fn list(&self, i: usize) -> &'a [u32] {
        self.targets.get(self.starts[i] as usize..self.starts[i + 1] as usize).unwrap_or(&[])
    }

    fn pairs(self) -> impl Iterator<Item = (u32, u32)> + 'a {
        self.keys.iter().enumerate().flat_map(move |(i, &k)| self.list(i).iter().map(move |&t| (k, t)))
    }

    fn check(&self, target_count: usize) -> Result<(), String> {
        let sorted = self.keys.windows(2).all(|w| w[0] < w[1]) && self.starts.windows(2).all(|w| w[0] <= w[1]);
        if !sorted || self.starts[0] != 0 {
            return Err("its keys or list starts are out of order".into());
        }
        if let Some(t) = self.targets.iter().find(|&&t| t as usize >= target_count) {
            return Err(format!("a list names target {t}, past the index's {target_count}"));
        }
        Ok(())
    }
}

impl<'a> ProteinTable<'a> {
    /// Views the section's bytes, checking only their lengths (see [`ProteinTable::check`]).
    pub fn parse(bytes: &'a [u8]) -> Result<Self, String> {
        let head = std::mem::size_of::<ProteinParams>();
        let params: ProteinParams =
            bytemuck::pod_read_unaligned(bytes.get(..head).ok_or("it is shorter than its parameters")?);
        if !(1..=7).contains(&params.k) || params.sample == 0 {
            return Err(format!("k {} and sample {} are out of range", params.k, params.sample));
        }
        let words: &[u32] = bytemuck::try_cast_slice(&bytes[head..]).map_err(|e| format!("its arrays: {e}"))?;
        let (kept, rest) = ListsView::split(words, params.keys as usize)?;
        let (over, rest) = ListsView::split(rest, params.over_cap as usize)?;
        if !rest.is_empty() {
            return Err(format!("{} words follow its lists", rest.len()));
        }
        Ok(Self { params, kept, over })
    }

    /// Every (k-mer, target) pair it was made of, those over the cap included: what `update`
    /// starts from.
    pub fn pairs(&self) -> impl Iterator<Item = (u32, u32)> + 'a {
        self.kept.pairs().chain(self.over.pairs())
    }

    /// The k-mers that lookups see (those over the cap left out): their number, and each one with
    /// its targets.
    pub(crate) fn looked_up_len(&self) -> usize {
        self.kept.keys.len()
    }

    pub(crate) fn looked_up(&self, i: usize) -> (u32, &'a [u32]) {
        (self.kept.keys[i], self.kept.list(i))
    }

    /// Checks what lookups rely on for right answers: keys ascending, list starts in order, every
    /// target below `target_count` (the index's). Reads the whole table: done by `Verify::All`.
    pub fn check(&self, target_count: usize) -> Result<(), String> {
        self.kept.check(target_count)?;
        self.over.check(target_count)
    }

    /// The targets holding k-mer `code`, ascending (empty if none).
    pub(crate) fn targets_of(&self, code: u32) -> &'a [u32] {
        self.kept.keys.binary_search(&code).map_or(&[], |i| self.kept.list(i))
    }

    /// Distinct k-mers, and (k-mer, target) entries.
    pub fn len(&self) -> (usize, usize) {
        (self.kept.keys.len(), self.kept.targets.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_round_trips_and_drops_k_mers_over_the_cap() {
        let p = ProteinParams { k: 3, sample: 1, min_orf: 10, cap: 2, keys: 0, over_cap: 0 };
        let bytes = encode_table(vec![(50, 1), (7, 0), (50, 0), (7, 0), (9, 0), (9, 1), (9, 2)], p);
        let t = ProteinTable::parse(&bytes).unwrap();
        t.check(3).unwrap();
        assert_eq!(t.targets_of(7), [0]);
        assert_eq!(t.targets_of(50), [0, 1]);
        assert!(t.targets_of(9).is_empty(), "held by 3 > cap targets");
        assert_eq!(t.len(), (2, 3));
        // Every pair comes back, the one over the cap too, and makes the same bytes again.
        let pairs: Vec<(u32, u32)> = t.pairs().collect();
        assert_eq!(pairs, [(7, 0), (50, 0), (50, 1), (9, 0), (9, 1), (9, 2)]);
        assert_eq!(encode_table(pairs, p), bytes);
        assert!(t.check(1).unwrap_err().contains("past the index's 1"));
        assert!(ProteinTable::parse(&bytes[..10]).is_err());
        assert!(ProteinTable::parse(&bytes[..bytes.len() - 4]).is_err(), "a list cut short");
    }
}
