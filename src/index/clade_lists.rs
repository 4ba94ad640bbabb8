//! The dropped section: every feature left out of the index for having more locations than the
//! cap, with all of its locations. Classification never reads it; `kmerdb update` does, because
//! removing genomes can bring such a feature back under the cap (and adding genomes must keep it
//! dropped), which only its whole list can tell.
//!
//! ```text
//! u64          features
//! per feature  feature u32, locations u32          (shard order, then ascending feature)
//! u64 each     the locations, list after list       (each ascending: target << 32 | window)
//! ```
//! Locations are stored unpacked (not in the shard data's packed form) because an update may
//! change the packing: more targets or longer ones take more bits.

use crate::sketch::Feature;

/// A location independent of the index's packing: `target << 32 | window`.
pub fn location(target: u32, window: u32) -> u64 {
    (target as u64) << 32 | window as u64
}

/// The (target, window) of a [`location`].
pub fn target_window(location: u64) -> (u32, u32) {
    ((location >> 32) as u32, location as u32)
}

/// Dropped features with their locations, in the order they were added.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DroppedLists {
    features: Vec<[u32; 2]>,
    locations: Vec<u64>,
}

impl DroppedLists {
    /// Adds `feature` with its ascending [`location`]s.
    pub fn push(&mut self, feature: Feature, locations: impl IntoIterator<Item = u64>) {
        let before = self.locations.len();
        self.locations.extend(locations);
        let count = self.locations.len() - before;
        debug_assert!(self.locations[before..].is_sorted(), "a dropped list is sorted");
        self.features.push([feature, u32::try_from(count).expect("a feature has fewer than 2^32 locations")]);
    }

    /// Adds the lists of `other` after these.
    pub fn append(&mut self, mut other: DroppedLists) {
        self.features.append(&mut other.features);
        self.locations.append(&mut other.locations);
    }

    pub fn len(&self) -> usize {
        self.features.len()
    }

    pub fn is_empty(&self) -> bool {
        self.features.is_empty()
    }

    /// The section's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(8 + self.features.len() * 8 + self.locations.len() * 8);
        out.extend_from_slice(&(self.features.len() as u64).to_le_bytes());
        out.extend_from_slice(bytemuck::cast_slice(&self.features));
        out.extend_from_slice(bytemuck::cast_slice(&self.locations));
        out
    }
}

/// The dropped section as stored, read in place.
#[derive(Debug, Clone, Copy)]
pub struct DroppedView<'a> {
    features: &'a [[u32; 2]],
    locations: &'a [u64],
}

impl<'a> DroppedView<'a> {
    /// Reads the section from `bytes` (8-byte aligned), checking that its counts add up; the error
    /// says what does not.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, String> {
        let short = || format!("it has {} bytes, fewer than its counts need", bytes.len());
        let head: [u8; 8] = bytes.get(..8).ok_or_else(short)?.try_into().expect("8 bytes");
        let n = usize::try_from(u64::from_le_bytes(head)).map_err(|_| short())?;
        let table_end = n.checked_mul(8).and_then(|b| b.checked_add(8)).ok_or_else(short)?;
        let table = bytes.get(8..table_end).ok_or_else(short)?;
        let features: &[[u32; 2]] = bytemuck::try_cast_slice(table).map_err(|e| format!("its feature table: {e}"))?;
        let total: u64 = features.iter().map(|f| f[1] as u64).sum();
        let rest = &bytes[table_end..];
        if rest.len() as u64 != total * 8 {
            return Err(format!("its lists hold {} bytes where its counts say {}", rest.len(), total * 8));
        }
        let locations: &[u64] = bytemuck::try_cast_slice(rest).map_err(|e| format!("its locations: {e}"))?;
        Ok(Self { features, locations })
    }

    /// Dropped features.
    pub fn len(&self) -> usize {
        self.features.len()
    }

    pub fn is_empty(&self) -> bool {
        self.features.is_empty()
    }

    /// Locations of all dropped features.
    pub fn locations(&self) -> usize {
        self.locations.len()
    }

    /// Each dropped feature with its [`location`]s, in stored order.
    pub fn iter(&self) -> impl Iterator<Item = (Feature, &'a [u64])> + 'a {
        let (features, locations) = (self.features, self.locations);
        let mut at = 0;
        features.iter().map(move |&[feature, count]| {
            let list = &locations[at..at + count as usize];
            at += count as usize;
            (feature, list)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What is pushed is what is read back, and a section whose counts do not add up is refused.
    #[test]
    fn lists_round_trip_and_bad_counts_are_refused() {
        let mut lists = DroppedLists::default();
        lists.push(7, [location(0, 1), location(0, 5), location(3, 2)]);
        let mut more = DroppedLists::default();
        more.push(2, [location(u32::MAX, u32::MAX)]);
        lists.append(more);
        let bytes = lists.encode();
        let aligned: Vec<u64> = bytes.chunks(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())).collect();
        let view = DroppedView::parse(bytemuck::cast_slice(&aligned)).unwrap();
        let read: Vec<(u32, Vec<u64>)> = view.iter().map(|(f, l)| (f, l.to_vec())).collect();
        assert_eq!(read, [(7, vec![location(0, 1), location(0, 5), location(3, 2)]), (2, vec![u64::MAX])]);
        assert_eq!((view.len(), view.locations()), (2, 4));
        assert_eq!(target_window(location(3, 2)), (3, 2));
        let empty = DroppedLists::default().encode();
        assert!(DroppedView::parse(&empty).unwrap().is_empty());
        let bytes: &[u8] = bytemuck::cast_slice(&aligned);
        assert!(DroppedView::parse(&bytes[..bytes.len() - 8]).unwrap_err().contains("counts say"));
        assert!(DroppedView::parse(&bytes[..12]).unwrap_err().contains("fewer than its counts need"));
        let mut huge = aligned.clone();
        huge[0] = u64::MAX;
        assert!(DroppedView::parse(bytemuck::cast_slice(&huge)).is_err());
    }
}
