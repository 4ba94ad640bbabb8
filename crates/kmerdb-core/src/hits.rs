//! What a read's lookups found, in the shape both classifiers (`classify` on the CPU,
//! `gpu::classify` on GPUs) produce: candidates (a target and its best window range) and the hit
//! list's runs. It sits below both so that neither reaches into the other.

use crate::taxonomy::TaxId;

/// A target and its best window range. The GPU's `struct Candidate` (`cuda/classify.cuh`) carries
/// the same fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    pub target: u32,
    pub hits: u32,
    pub first_window: u32,
    pub last_window: u32,
}

/// Appends a feature's taxon to a mate's hit list, run-length encoded.
pub fn push_run(runs: &mut Vec<(TaxId, u32)>, taxon: TaxId) {
    match runs.last_mut() {
        Some((t, n)) if *t == taxon => *n += 1,
        _ => runs.push((taxon, 1)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_of_one_taxon_are_counted_together() {
        let mut runs = Vec::new();
        for t in [562, 562, 0, 562, 561, 561] {
            push_run(&mut runs, t);
        }
        assert_eq!(runs, [(562, 2), (0, 1), (562, 1), (561, 2)]);
    }
}
