//! Taxid → dense row index, the one lookup every taxonomy query starts with.
//!
//! NCBI taxids are small (below ~3.5 M) and the full taxonomy uses most of them, so a plain array
//! indexed by taxid is both smallest and fastest there. A pruned tree of a few thousand taxa with
//! taxids spread up to millions is better served by a small hash map that stays in cache, and a
//! custom taxonomy may use taxids up to `u32::MAX`. [`TaxIndex::build`] picks between the two.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use super::TaxId;

/// Marks an empty slot of the dense table.
const EMPTY: u32 = u32::MAX;

/// A fast hasher for `u32` keys (folded 64×64→128 multiply). Not DoS-resistant, which does not
/// matter for taxids read from the user's own files.
#[derive(Default, Clone, Copy)]
pub struct U32Hasher(u64);

impl Hasher for U32Hasher {
    #[inline]
    fn write_u32(&mut self, x: u32) {
        let product = u128::from(self.0 ^ u64::from(x)) * 0x9e37_79b9_7f4a_7c15_u128;
        self.0 = (product as u64) ^ ((product >> 64) as u64);
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u32(u32::from(b));
        }
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

/// A `HashMap` keyed by taxid with [`U32Hasher`].
pub type TaxidMap<V> = HashMap<TaxId, V, BuildHasherDefault<U32Hasher>>;

/// Maps a taxid to its row (position) in a table of taxa.
#[derive(Debug, Clone)]
pub(crate) enum TaxIndex {
    /// `slots[taxid]` is the row, or [`EMPTY`].
    Dense(Vec<u32>),
    /// For sparse taxids.
    Sparse(TaxidMap<u32>),
}

impl TaxIndex {
    /// Indexes `taxids` (row `i` holds `taxids[i]`).
    ///
    /// Returns `Err(row)` for the first row whose taxid already appeared in an earlier row.
    pub(crate) fn build(taxids: &[TaxId]) -> Result<Self, usize> {
        let n = taxids.len();
        let max = taxids.iter().copied().max().unwrap_or(0) as usize;
        // Dense while the table is at most a few times larger than the number of taxa.
        if max < 4 * n + 4096 {
            let mut slots = vec![EMPTY; max + 1];
            for (row, &taxid) in taxids.iter().enumerate() {
                let slot = &mut slots[taxid as usize];
                if *slot != EMPTY {
                    return Err(row);
                }
                *slot = row as u32;
            }
            Ok(TaxIndex::Dense(slots))
        } else {
            let mut map = TaxidMap::with_capacity_and_hasher(n, Default::default());
            for (row, &taxid) in taxids.iter().enumerate() {
                if map.insert(taxid, row as u32).is_some() {
                    return Err(row);
                }
            }
            Ok(TaxIndex::Sparse(map))
        }
    }

    /// The row of `taxid`, if indexed.
    #[inline]
    pub(crate) fn get(&self, taxid: TaxId) -> Option<u32> {
        match self {
            TaxIndex::Dense(slots) => match slots.get(taxid as usize) {
                Some(&row) if row != EMPTY => Some(row),
                _ => None,
            },
            TaxIndex::Sparse(map) => map.get(&taxid).copied(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dense_and_sparse_agree() {
        let small = [1, 5, 3, 2];
        let sparse = [1, 3_000_000, 7, 4_000_000_000];
        let d = TaxIndex::build(&small).expect("no duplicates");
        let s = TaxIndex::build(&sparse).expect("no duplicates");
        assert!(matches!(d, TaxIndex::Dense(_)));
        assert!(matches!(s, TaxIndex::Sparse(_)));
        for (row, &t) in small.iter().enumerate() {
            assert_eq!(d.get(t), Some(row as u32));
        }
        for (row, &t) in sparse.iter().enumerate() {
            assert_eq!(s.get(t), Some(row as u32));
        }
        assert_eq!(d.get(4), None);
        assert_eq!(d.get(1_000_000), None);
        assert_eq!(s.get(2), None);
    }

    #[test]
    fn duplicates_are_reported_by_row() {
        assert_eq!(TaxIndex::build(&[1, 2, 1]).err(), Some(2));
        assert_eq!(TaxIndex::build(&[1, 9_000_000, 9_000_000]).err(), Some(2));
    }
}
