//! The small, pruned taxonomy stored inside an index and used while classifying reads.
//!
//! A [`TaxonTree`] is built from a list of [`Taxon`] records (from [`super::NcbiTaxonomy::prune`],
//! or written by hand for a synthetic taxonomy) and is serialised as exactly that list, so the
//! on-disk form is plain data and every load re-runs the checks in [`TaxonTree::new`]: exactly one
//! root (taxid 1, parent 1), taxid 0 unused (it means "unclassified"), no duplicates, every parent
//! present, and every taxon reaching the root (no cycles).
//!
//! Queries run on dense internal indices: taxa sorted by taxid, each with its parent's index, its
//! depth (root = 0) and its precomputed Kraken rank code, so [`TaxonTree::lca`], which runs for every
//! classified read, is two index lookups and a walk of at most the tree's depth with no allocation.

use serde::{Deserialize, Serialize};

use super::index::TaxIndex;
use super::{ROOT, TaxId, TaxonomyError, UNCLASSIFIED};

/// One taxon: the unit a [`TaxonTree`] is built from and stored as.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Taxon {
    /// Its taxid (never 0).
    pub taxid: TaxId,
    /// Its parent's taxid; the root (taxid 1) is its own parent.
    pub parent: TaxId,
    /// NCBI rank, e.g. `"species"` or `"no rank"`.
    #[serde(deserialize_with = "crate::checked_str::string")]
    pub rank: String,
    /// Scientific name.
    #[serde(deserialize_with = "crate::checked_str::string")]
    pub name: String,
}

/// A validated taxonomy tree with constant-time taxid lookup and O(depth) LCA.
///
/// Serialises as its list of taxa sorted by taxid; deserialising validates again.
#[derive(Clone, Serialize, Deserialize)]
#[serde(try_from = "Vec<Taxon>", into = "Vec<Taxon>")]
pub struct TaxonTree {
    /// All taxa, sorted by taxid; a taxon's position is its internal index.
    taxa: Vec<Taxon>,
    /// Taxid → internal index.
    index: TaxIndex,
    /// Internal index of each taxon's parent (the root's is its own).
    parents: Vec<u32>,
    /// Distance from the root (root = 0).
    depths: Vec<u32>,
    /// Kraken rank letter of each taxon (`b'R'`, `b'D'`, ...).
    code_letters: Vec<u8>,
    /// Distance below the taxon that gave the letter (0 if the taxon's own rank is coded).
    code_offsets: Vec<u32>,
    /// Each taxon's nearest species (itself or an ancestor), or `NO_SPECIES`: the classifier asks
    /// for it for every call's candidates, and walking up comparing rank names was 4% of a GPU
    /// classify's CPU time on a strain-rich index.
    species: Vec<u32>,
    /// Each taxon's place in a depth-first walk from the root, and the place after its subtree:
    /// `a` is `t` or above it exactly when `enter[a] <= enter[t] < exit[a]`. The decision asks
    /// that of every clade for every candidate; walking up for it, and the lookups of taxids
    /// on the way, were most of its time on a strain-rich index.
    enter: Vec<u32>,
    exit: Vec<u32>,
    /// Children of taxon `i` are `children[child_starts[i]..child_starts[i + 1]]`, by taxid.
    child_starts: Vec<u32>,
    children: Vec<TaxId>,
}

impl TaxonTree {
    /// Builds and validates a tree from `taxa` in any order.
    ///
    /// A synthetic taxonomy needs only a root and its descendants:
    /// ```
    /// # use kmerdb_core::taxonomy::{Taxon, TaxonTree};
    /// let t = |taxid, parent, rank: &str, name: &str| Taxon {
    ///     taxid, parent, rank: rank.into(), name: name.into(),
    /// };
    /// let tree = TaxonTree::new(vec![
    ///     t(1, 1, "no rank", "root"),
    ///     t(10, 1, "genus", "G"),
    ///     t(11, 10, "species", "G a"),
    ///     t(12, 10, "species", "G b"),
    /// ])?;
    /// assert_eq!(tree.lca(11, 12), 10);
    /// assert_eq!(tree.kreport_rank_code(11), "S");
    /// # Ok::<(), kmerdb_core::taxonomy::TaxonomyError>(())
    /// ```
    pub fn new(mut taxa: Vec<Taxon>) -> Result<Self, TaxonomyError> {
        taxa.sort_unstable_by_key(|t| t.taxid);
        if taxa.first().is_some_and(|t| t.taxid == UNCLASSIFIED) {
            return Err(TaxonomyError::ReservedTaxid);
        }
        let taxids: Vec<TaxId> = taxa.iter().map(|t| t.taxid).collect();
        let index = TaxIndex::build(&taxids).map_err(|row| TaxonomyError::DuplicateTaxid { taxid: taxids[row] })?;
        let root = match index.get(ROOT) {
            Some(root) if taxa[root as usize].parent == ROOT => root,
            _ => return Err(TaxonomyError::MissingRoot),
        };

        let breaks = |s: &str| s.bytes().any(|b| matches!(b, b'\t' | b'\n' | b'\r'));
        if let Some(t) = taxa.iter().find(|t| breaks(&t.name) || breaks(&t.rank)) {
            return Err(TaxonomyError::UnprintableName { taxid: t.taxid });
        }
        let mut parents = Vec::with_capacity(taxa.len());
        let mut child_counts = vec![0u32; taxa.len()];
        for t in &taxa {
            let parent =
                index.get(t.parent).ok_or(TaxonomyError::DanglingParent { taxid: t.taxid, parent: t.parent })?;
            if t.parent == t.taxid && t.taxid != ROOT {
                return Err(TaxonomyError::SecondRoot { taxid: t.taxid });
            }
            if t.taxid != ROOT {
                child_counts[parent as usize] += 1;
            }
            parents.push(parent);
        }

        // Children lists (CSR); taxa are sorted, so each list comes out sorted by taxid.
        let mut child_starts = Vec::with_capacity(taxa.len() + 1);
        let mut total = 0u32;
        for &count in &child_counts {
            child_starts.push(total);
            total += count;
        }
        child_starts.push(total);
        let mut fill = child_starts.clone();
        let mut child_idx = vec![0u32; total as usize];
        for (i, &parent) in parents.iter().enumerate() {
            if i as u32 != root {
                let slot = &mut fill[parent as usize];
                child_idx[*slot as usize] = i as u32;
                *slot += 1;
            }
        }

        // Breadth-first from the root: depths and rank codes flow from parent to child, and a
        // taxon never reached lies on (or hangs from) a cycle.
        let mut depths = vec![u32::MAX; taxa.len()];
        let mut code_letters = vec![0u8; taxa.len()];
        let mut code_offsets = vec![0u32; taxa.len()];
        let r = root as usize;
        depths[r] = 0;
        code_letters[r] = b'R';
        let mut species = vec![NO_SPECIES; taxa.len()];
        if taxa[r].rank == "species" {
            species[r] = root;
        }
        let mut queue = Vec::with_capacity(taxa.len());
        queue.push(root);
        let mut head = 0;
        while head < queue.len() {
            let p = queue[head] as usize;
            head += 1;
            let (start, end) = (child_starts[p] as usize, child_starts[p + 1] as usize);
            for &c in &child_idx[start..end] {
                let c = c as usize;
                depths[c] = depths[p] + 1;
                species[c] = if taxa[c].rank == "species" { c as u32 } else { species[p] };
                match rank_letter(&taxa[c].rank) {
                    Some(letter) => code_letters[c] = letter,
                    None => {
                        code_letters[c] = code_letters[p];
                        code_offsets[c] = code_offsets[p] + 1;
                    }
                }
                queue.push(c as u32);
            }
        }
        if queue.len() != taxa.len() {
            let stray = depths.iter().position(|&d| d == u32::MAX).map_or(ROOT, |i| taxa[i].taxid);
            return Err(TaxonomyError::Cycle { taxid: stray });
        }

        // Subtree sizes from the leaves up (the breadth-first order reversed), then each child's
        // place after its elder siblings' subtrees.
        let mut sizes = vec![1u32; taxa.len()];
        for &c in queue.iter().rev() {
            let p = parents[c as usize] as usize;
            if c as usize != p {
                sizes[p] += sizes[c as usize];
            }
        }
        let mut enter = vec![0u32; taxa.len()];
        for &p in &queue {
            let p = p as usize;
            let mut next = enter[p] + 1;
            for &c in &child_idx[child_starts[p] as usize..child_starts[p + 1] as usize] {
                enter[c as usize] = next;
                next += sizes[c as usize];
            }
        }
        let exit = enter.iter().zip(&sizes).map(|(&e, &n)| e + n).collect();

        let children = child_idx.iter().map(|&i| taxa[i as usize].taxid).collect();
        Ok(TaxonTree {
            taxa,
            index,
            parents,
            depths,
            code_letters,
            code_offsets,
            species,
            enter,
            exit,
            child_starts,
            children,
        })
    }

    /// All taxa, sorted by taxid.
    pub fn taxa(&self) -> &[Taxon] {
        &self.taxa
    }

    /// Number of taxa.
    pub fn len(&self) -> usize {
        self.taxa.len()
    }

    /// Always false: a valid tree holds at least the root.
    pub fn is_empty(&self) -> bool {
        self.taxa.is_empty()
    }

    /// True if `taxid` is in the tree.
    pub fn contains(&self, taxid: TaxId) -> bool {
        self.index.get(taxid).is_some()
    }

    /// The taxon with this taxid.
    pub fn get(&self, taxid: TaxId) -> Option<&Taxon> {
        self.index.get(taxid).map(|i| &self.taxa[i as usize])
    }

    /// The parent of `taxid`; `None` for the root and for taxids not in the tree.
    pub fn parent(&self, taxid: TaxId) -> Option<TaxId> {
        let i = self.index.get(taxid)? as usize;
        let p = self.parents[i] as usize;
        (p != i).then(|| self.taxa[p].taxid)
    }

    /// The children of `taxid`, sorted by taxid (empty for leaves and unknown taxids).
    pub fn children(&self, taxid: TaxId) -> &[TaxId] {
        match self.index.get(taxid) {
            Some(i) => {
                let i = i as usize;
                &self.children[self.child_starts[i] as usize..self.child_starts[i + 1] as usize]
            }
            None => &[],
        }
    }

    /// Number of edges from the root to `taxid` (root = 0); `None` if not in the tree.
    pub fn depth(&self, taxid: TaxId) -> Option<u32> {
        self.index.get(taxid).map(|i| self.depths[i as usize])
    }

    /// The taxids from the root down to `taxid`, root first; empty if not in the tree.
    pub fn lineage(&self, taxid: TaxId) -> Vec<TaxId> {
        let Some(mut i) = self.index.get(taxid).map(|i| i as usize) else {
            return Vec::new();
        };
        let mut out = vec![0; self.depths[i] as usize + 1];
        for slot in out.iter_mut().rev() {
            *slot = self.taxa[i].taxid;
            i = self.parents[i] as usize;
        }
        out
    }

    /// Lowest common ancestor of `a` and `b`.
    ///
    /// Taxid 0 means "no taxon yet": `lca(0, x) == x` and `lca(x, 0) == x`, so a running LCA can
    /// start from 0. A taxid not in the tree makes the answer the root (1), the only ancestor that
    /// is certainly right; check [`TaxonTree::contains`] first where that matters.
    #[inline]
    pub fn lca(&self, a: TaxId, b: TaxId) -> TaxId {
        if a == UNCLASSIFIED {
            return b;
        }
        if b == UNCLASSIFIED {
            return a;
        }
        let (Some(i), Some(j)) = (self.index.get(a), self.index.get(b)) else {
            return ROOT;
        };
        self.taxa[self.lca_index(i as usize, j as usize)].taxid
    }

    /// Whether `ancestor` is `taxon` or above it: `lca(ancestor, taxon) == ancestor`, without a
    /// walk (the decision asks it of every clade for every candidate).
    #[inline]
    pub fn is_ancestor(&self, ancestor: TaxId, taxon: TaxId) -> bool {
        if ancestor == UNCLASSIFIED {
            return taxon == UNCLASSIFIED;
        }
        if taxon == UNCLASSIFIED {
            return true;
        }
        let (Some(a), Some(t)) = (self.index.get(ancestor), self.index.get(taxon)) else {
            return ancestor == ROOT;
        };
        self.is_ancestor_node(a, t)
    }

    /// [`TaxonTree::is_ancestor`] of two internal node indices.
    #[inline]
    pub fn is_ancestor_node(&self, ancestor: u32, node: u32) -> bool {
        let (a, t) = (ancestor as usize, node as usize);
        self.enter[a] <= self.enter[t] && self.enter[t] < self.exit[a]
    }

    /// The node of the nearest species at or above `node` (as `ancestor_at_rank(_, "species")`).
    #[inline]
    pub fn species_node(&self, node: u32) -> Option<u32> {
        let s = self.species[node as usize];
        (s != NO_SPECIES).then_some(s)
    }

    /// The internal node index of `taxid`, for repeated [`TaxonTree::lca_node`] calls without
    /// taxid lookups (the classifier maps each target to its node once).
    pub fn node(&self, taxid: TaxId) -> Option<u32> {
        self.index.get(taxid)
    }

    /// The taxid of an internal node index.
    pub fn node_taxid(&self, node: u32) -> TaxId {
        self.taxa[node as usize].taxid
    }

    /// Each node's parent node (the root is its own parent), for the GPU's LCAs.
    pub fn parents(&self) -> &[u32] {
        &self.parents
    }

    /// Each node's depth below the root, for the GPU's LCAs.
    pub fn depths(&self) -> &[u32] {
        &self.depths
    }

    /// LCA of two internal node indices.
    #[inline]
    pub fn lca_node(&self, a: u32, b: u32) -> u32 {
        if a == b { a } else { self.lca_index(a as usize, b as usize) as u32 }
    }

    /// LCA on internal indices: one of them when it lies above the other (mostly, in a read's
    /// decision); else lift the deeper one to the other's depth, then both together.
    #[inline]
    fn lca_index(&self, mut i: usize, mut j: usize) -> usize {
        if self.is_ancestor_node(i as u32, j as u32) {
            return i;
        }
        if self.is_ancestor_node(j as u32, i as u32) {
            return j;
        }
        let (mut di, mut dj) = (self.depths[i], self.depths[j]);
        while di > dj {
            i = self.parents[i] as usize;
            di -= 1;
        }
        while dj > di {
            j = self.parents[j] as usize;
            dj -= 1;
        }
        while i != j {
            i = self.parents[i] as usize;
            j = self.parents[j] as usize;
        }
        i
    }

    /// The nearest ancestor of `taxid` (itself included) whose rank is `rank`; `None` if there is
    /// none or `taxid` is not in the tree. `"domain"` and `"superkingdom"` match each other, as
    /// NCBI renamed the one to the other.
    pub fn ancestor_at_rank(&self, taxid: TaxId, rank: &str) -> Option<TaxId> {
        let mut i = self.index.get(taxid)? as usize;
        if rank == "species" {
            let s = self.species[i];
            return (s != NO_SPECIES).then(|| self.taxa[s as usize].taxid);
        }
        let wanted = |r: &str| r == rank || (is_domain(rank) && is_domain(r));
        loop {
            if wanted(&self.taxa[i].rank) {
                return Some(self.taxa[i].taxid);
            }
            let p = self.parents[i] as usize;
            if p == i {
                return None;
            }
            i = p;
        }
    }

    /// Kraken report rank code of `taxid`: `U` for 0 (unclassified), `R` for the root, one of
    /// `D K P C O F G S` for a taxon at that rank (`superkingdom` and `domain` are both `D`),
    /// otherwise the code of the nearest coded ancestor followed by the number of levels below it
    /// (`S1` for a strain under a species, `R1` for "cellular organisms" under the root), and `-`
    /// for a taxid not in the tree. This matches `KrakenReportDFS` in Kraken 2's `reports.cc`.
    pub fn kreport_rank_code(&self, taxid: TaxId) -> String {
        if taxid == UNCLASSIFIED {
            return "U".to_owned();
        }
        let Some(i) = self.index.get(taxid).map(|i| i as usize) else {
            return "-".to_owned();
        };
        let letter = char::from(self.code_letters[i]);
        match self.code_offsets[i] {
            0 => letter.to_string(),
            offset => format!("{letter}{offset}"),
        }
    }
}

/// A summary: the number of taxa and the first few of them.
impl std::fmt::Debug for TaxonTree {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaxonTree")
            .field("len", &self.taxa.len())
            .field("first", &&self.taxa[..self.taxa.len().min(3)])
            .finish_non_exhaustive()
    }
}

impl TryFrom<Vec<Taxon>> for TaxonTree {
    type Error = TaxonomyError;

    fn try_from(taxa: Vec<Taxon>) -> Result<Self, Self::Error> {
        TaxonTree::new(taxa)
    }
}

impl From<TaxonTree> for Vec<Taxon> {
    fn from(tree: TaxonTree) -> Self {
        tree.taxa
    }
}

fn is_domain(rank: &str) -> bool {
    rank == "superkingdom" || rank == "domain"
}

/// No species at or above a taxon (`TaxonTree::species`).
const NO_SPECIES: u32 = u32::MAX;

/// The Kraken report letter of a rank, if it has one of its own.
fn rank_letter(rank: &str) -> Option<u8> {
    Some(match rank {
        "superkingdom" | "domain" => b'D',
        "kingdom" => b'K',
        "phylum" => b'P',
        "class" => b'C',
        "order" => b'O',
        "family" => b'F',
        "genus" => b'G',
        "species" => b'S',
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(taxid: TaxId, parent: TaxId, rank: &str, name: &str) -> Taxon {
        Taxon { taxid, parent, rank: rank.into(), name: name.into() }
    }

    /// root → cellular organisms → Bacteria → ... → E. coli → K-12 → MG1655, with Salmonella
    /// beside Escherichia, an uncoded clade under the root with an uncoded child, and Archaea
    /// under the newer rank name "domain".
    fn ecoli_tree() -> TaxonTree {
        TaxonTree::new(vec![
            t(511145, 83333, "strain", "Escherichia coli str. K-12 substr. MG1655"),
            t(1, 1, "no rank", "root"),
            t(131567, 1, "no rank", "cellular organisms"),
            t(2, 131567, "superkingdom", "Bacteria"),
            t(2157, 131567, "domain", "Archaea"),
            t(1224, 2, "phylum", "Pseudomonadota"),
            t(1236, 1224, "class", "Gammaproteobacteria"),
            t(91347, 1236, "order", "Enterobacterales"),
            t(543, 91347, "family", "Enterobacteriaceae"),
            t(561, 543, "genus", "Escherichia"),
            t(562, 561, "species", "Escherichia coli"),
            t(83333, 562, "strain", "Escherichia coli K-12"),
            t(590, 543, "genus", "Salmonella"),
            t(28901, 590, "species", "Salmonella enterica"),
            t(12908, 1, "no rank", "unclassified sequences"),
            t(28384, 12908, "no rank", "other sequences"),
            t(1423, 1, "species", "Bacillus subtilis (placed oddly)"),
        ])
        .expect("valid tree")
    }

    #[test]
    fn taxa_are_sorted_and_reachable() {
        let tree = ecoli_tree();
        let ids: Vec<TaxId> = tree.taxa().iter().map(|t| t.taxid).collect();
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(ids, sorted);
        assert_eq!(tree.len(), 17);
        assert_eq!(tree.get(562).map(|t| t.name.as_str()), Some("Escherichia coli"));
        assert_eq!(tree.get(3), None);
        assert_eq!(tree.parent(562), Some(561));
        assert_eq!(tree.parent(1), None);
        assert_eq!(tree.parent(3), None);
        assert_eq!(tree.children(1), &[1423, 12908, 131567]);
        assert_eq!(tree.children(543), &[561, 590]);
        assert!(tree.children(511145).is_empty());
    }

    #[test]
    fn depth_and_lineage() {
        let tree = ecoli_tree();
        assert_eq!(tree.depth(1), Some(0));
        assert_eq!(tree.depth(2), Some(2));
        assert_eq!(tree.depth(511145), Some(10));
        assert_eq!(tree.depth(3), None);
        assert_eq!(tree.lineage(83333), vec![1, 131567, 2, 1224, 1236, 91347, 543, 561, 562, 83333]);
        assert_eq!(tree.lineage(1), vec![1]);
        assert!(tree.lineage(3).is_empty());
    }

    /// On random trees (taxids shuffled against the shape, so that children are not in taxid
    /// order), `is_ancestor` and `lca` of every pair are what the lineages say: an ancestor is
    /// in the other's lineage, the LCA is the last taxon the two lineages share.
    #[test]
    fn ancestry_and_lca_agree_with_the_lineages() {
        let mut state = 0x9e37_79b9_u64;
        let mut next = |n: u64| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 33) % n
        };
        for trial in 0..20 {
            let n = 2 + next(60);
            // Node i's parent is an earlier node; taxids are a permutation of 1..=n, node 0 the root.
            let mut ids: Vec<TaxId> = (2..=n as TaxId).collect();
            for i in (1..ids.len()).rev() {
                ids.swap(i, next(i as u64 + 1) as usize);
            }
            ids.insert(0, 1);
            let taxa = (0..n as usize)
                .map(|i| {
                    let parent = if i == 0 { 0 } else { next(i as u64) as usize };
                    t(ids[i], ids[parent], if trial % 2 == 0 { "no rank" } else { "species" }, "x")
                })
                .collect();
            let tree = TaxonTree::new(taxa).expect("a valid random tree");
            for &a in &ids {
                for &b in &ids {
                    let (la, lb) = (tree.lineage(a), tree.lineage(b));
                    assert_eq!(tree.is_ancestor(a, b), lb.contains(&a), "trial {trial}: {a} above {b}");
                    let shared = la.iter().zip(&lb).take_while(|(x, y)| x == y).last().map(|(x, _)| *x);
                    assert_eq!(Some(tree.lca(a, b)), shared, "trial {trial}: lca({a}, {b})");
                }
            }
        }
    }

    #[test]
    fn lca_cases() {
        let tree = ecoli_tree();
        // Siblings and cousins.
        assert_eq!(tree.lca(561, 590), 543);
        assert_eq!(tree.lca(511145, 28901), 543);
        assert_eq!(tree.lca(2, 2157), 131567);
        assert_eq!(tree.lca(562, 28384), 1);
        // Ancestor and descendant, both orders.
        assert_eq!(tree.lca(562, 511145), 562);
        assert_eq!(tree.lca(511145, 2), 2);
        assert_eq!(tree.lca(1, 511145), 1);
        // Same node.
        assert_eq!(tree.lca(83333, 83333), 83333);
        // 0 is "no taxon yet".
        assert_eq!(tree.lca(0, 562), 562);
        assert_eq!(tree.lca(562, 0), 562);
        assert_eq!(tree.lca(0, 0), 0);
        // Unknown taxa give the root.
        assert_eq!(tree.lca(3, 562), 1);
        // A running LCA over hits.
        let hits = [511145, 83333, 562, 511145];
        assert_eq!(hits.iter().fold(0, |acc, &h| tree.lca(acc, h)), 562);
    }

    #[test]
    fn rank_codes_follow_kraken() {
        let tree = ecoli_tree();
        let code = |taxid| tree.kreport_rank_code(taxid);
        let lineage: Vec<String> = tree.lineage(511145).into_iter().map(code).collect();
        assert_eq!(lineage, ["R", "R1", "D", "P", "C", "O", "F", "G", "S", "S1", "S2"]);
        assert_eq!(code(2157), "D");
        assert_eq!(code(12908), "R1");
        assert_eq!(code(28384), "R2");
        assert_eq!(code(1423), "S");
        assert_eq!(code(0), "U");
        assert_eq!(code(3), "-");
    }

    #[test]
    fn ancestor_at_rank_finds_nearest() {
        let tree = ecoli_tree();
        assert_eq!(tree.ancestor_at_rank(511145, "species"), Some(562));
        assert_eq!(tree.ancestor_at_rank(511145, "strain"), Some(511145));
        assert_eq!(tree.ancestor_at_rank(562, "genus"), Some(561));
        assert_eq!(tree.ancestor_at_rank(562, "domain"), Some(2));
        assert_eq!(tree.ancestor_at_rank(2157, "superkingdom"), Some(2157));
        assert_eq!(tree.ancestor_at_rank(28384, "species"), None);
        assert_eq!(tree.ancestor_at_rank(3, "species"), None);
    }

    /// The species kept per taxon is the rank-name walk's answer for every taxon, odd trees
    /// included: a species under a species, a genus under a species, a root that is a species.
    #[test]
    fn species_of_every_taxon_equals_the_walk() {
        let walk = |tree: &TaxonTree, taxid: TaxId| {
            let mut t = taxid;
            loop {
                let taxon = tree.taxa().iter().find(|x| x.taxid == t)?;
                if taxon.rank == "species" {
                    return Some(t);
                }
                if taxon.parent == t {
                    return None;
                }
                t = taxon.parent;
            }
        };
        let odd = TaxonTree::new(vec![
            t(1, 1, "species", "root as a species"),
            t(10, 1, "genus", "G"),
            t(11, 10, "species", "S"),
            t(12, 11, "species", "S below S"),
            t(13, 12, "genus", "G below S"),
            t(14, 13, "strain", "a strain"),
            t(15, 10, "no rank", "unranked"),
        ])
        .unwrap();
        for tree in [ecoli_tree(), odd] {
            for taxon in tree.taxa() {
                assert_eq!(tree.ancestor_at_rank(taxon.taxid, "species"), walk(&tree, taxon.taxid), "{}", taxon.taxid);
            }
            assert_eq!(tree.ancestor_at_rank(999_999, "species"), None);
        }
    }

    /// `is_ancestor` answers as the LCA does for every pair of taxa, the unclassified 0 and taxids
    /// not in the tree included.
    #[test]
    fn is_ancestor_is_the_lca_test() {
        let mut taxids: Vec<TaxId> = ecoli_tree().taxa().iter().map(|t| t.taxid).collect();
        taxids.extend([UNCLASSIFIED, 999_999]);
        let tree = ecoli_tree();
        for &a in &taxids {
            for &b in &taxids {
                assert_eq!(tree.is_ancestor(a, b), tree.lca(a, b) == a, "{a} over {b}");
            }
        }
    }

    #[test]
    fn synthetic_tree_without_ncbi() {
        let tree = TaxonTree::new(vec![
            t(1, 1, "root", "synthetic root"),
            t(100, 1, "genome", "A"),
            t(200, 1, "genome", "B"),
            t(4_000_000_000, 100, "plasmid", "A plasmid"),
        ])
        .expect("valid");
        assert_eq!(tree.lca(4_000_000_000, 200), 1);
        assert_eq!(tree.lca(4_000_000_000, 100), 100);
        assert_eq!(tree.kreport_rank_code(4_000_000_000), "R2");
        assert_eq!(tree.kreport_rank_code(1), "R");
    }

    #[test]
    fn invalid_trees_are_rejected() {
        let root = || t(1, 1, "no rank", "root");
        let err = |taxa| TaxonTree::new(taxa).expect_err("invalid");
        assert!(matches!(err(vec![]), TaxonomyError::MissingRoot));
        assert!(matches!(err(vec![t(2, 2, "x", "x")]), TaxonomyError::MissingRoot));
        assert!(matches!(err(vec![t(1, 2, "x", "x"), t(2, 1, "x", "x")]), TaxonomyError::MissingRoot));
        assert!(matches!(err(vec![root(), t(0, 1, "x", "x")]), TaxonomyError::ReservedTaxid));
        assert!(matches!(
            err(vec![root(), t(5, 1, "x", "x"), t(5, 1, "y", "y")]),
            TaxonomyError::DuplicateTaxid { taxid: 5 }
        ));
        assert!(matches!(err(vec![root(), t(5, 7, "x", "x")]), TaxonomyError::DanglingParent { taxid: 5, parent: 7 }));
        assert!(matches!(err(vec![root(), t(5, 5, "x", "x")]), TaxonomyError::SecondRoot { taxid: 5 }));
        assert!(matches!(
            err(vec![root(), t(5, 6, "x", "x"), t(6, 5, "x", "x"), t(7, 1, "x", "x")]),
            TaxonomyError::Cycle { taxid: 5 }
        ));
    }

    #[test]
    fn serde_round_trip_revalidates() {
        let tree = ecoli_tree();
        let json = serde_json::to_string(&tree).expect("serialise");
        let back: TaxonTree = serde_json::from_str(&json).expect("deserialise");
        assert_eq!(back.taxa(), tree.taxa());
        assert_eq!(back.lca(511145, 28901), 543);
        let broken = r#"[{"taxid":5,"parent":1,"rank":"x","name":"x"}]"#;
        let err = serde_json::from_str::<TaxonTree>(broken).expect_err("no root");
        assert!(err.to_string().contains("no root"), "{err}");
    }
}
