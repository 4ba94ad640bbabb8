// The amino-acid stage's reads on the GPU: each mate translated in six frames and its sampled
// amino-acid k-mers listed, the device twin of `protein::mate_kmers` (crates/kmerdb-core/src/protein.rs), bit for bit
// and in the same order (frames 0, 1, 2 forward, then the reverse complement's; k-mers in frame
// order). The host merges a read's mates' lists, sorts them and looks them up in the table.
//
// Two launches over the same mates: `protein_kmer_counts` sizes each mate's list, a scan places the
// lists, `protein_kmers` writes them.
#pragma once
#include "common.cuh"
#include "sketch.cuh"
#include "classify.cuh"

// The k-mers' settings (ProteinParams' k and sample); must match ProteinKmerArgs in
// crates/kmerdb-gpu/src/gpu/protein.rs.
struct ProteinKmers {
    u32 k;
    u32 sample;
};
static_assert(sizeof(ProteinKmers) == 8, "struct ProteinKmers must match ProteinKmerArgs in crates/kmerdb-gpu/src/gpu/protein.rs");

// The standard genetic code by codon (T, C, A, G = 0..3, as a base-4 number), each amino acid as its
// digit in "ACDEFGHIKLMNPQRSTVWY"; 20 is a stop. protein.rs: CODE and AMINO.
__constant__ u8 CODON_DIGIT[64] = {
    4,  4,  9,  9,  15, 15, 15, 15, 19, 19, 20, 20, 1,  1,  20, 18,  // TTx TCx TAx TGx
    9,  9,  9,  9,  12, 12, 12, 12, 6,  6,  13, 13, 14, 14, 14, 14,  // CTx CCx CAx CGx
    7,  7,  7,  10, 16, 16, 16, 16, 11, 11, 8,  8,  15, 15, 14, 14,  // ATx ACx AAx AGx
    17, 17, 17, 17, 0,  0,  0,  0,  2,  2,  3,  3,  5,  5,  5,  5,   // GTx GCx GAx GGx
};
#define AMINO_STOP 20u
// A codon with a base other than A, C, G, T (protein.rs: `X`): ends a stretch, but is no stop.
#define AMINO_UNKNOWN 21u

// A base as T, C, A, G = 0..3, either case; 4 for anything else (protein.rs base_digit).
__device__ __forceinline__ u32 codon_base(u8 b) {
    switch (b) {
    case 'T': case 't': return 0;
    case 'C': case 'c': return 1;
    case 'A': case 'a': return 2;
    case 'G': case 'g': return 3;
    default: return 4;
    }
}

// Amino acid `i` of frame `f` of `seq` (`len` bases): a digit, AMINO_STOP or AMINO_UNKNOWN. Frames
// 3 to 5 read the reverse complement from its offsets 0 to 2; complementing swaps T with A and C
// with G, which is the digit's bit 1.
__device__ __forceinline__ u32 frame_amino(const u8* seq, u64 len, u32 f, u64 i) {
    u32 d[3];
    if (f < 3) {
        const u64 p = f + 3 * i;
        for (int j = 0; j < 3; ++j) d[j] = codon_base(seq[p + j]);
    } else {
        const u64 p = (f - 3) + 3 * i;
        for (int j = 0; j < 3; ++j) {
            const u32 b = codon_base(seq[len - 1 - p - j]);
            d[j] = b == 4 ? 4 : b ^ 2;
        }
    }
    if (d[0] == 4 || d[1] == 4 || d[2] == 4) return AMINO_UNKNOWN;
    return CODON_DIGIT[d[0] * 16 + d[1] * 4 + d[2]];
}

// ProteinParams::keeps.
__device__ __forceinline__ bool keeps_amino_kmer(u32 code, u32 sample) {
    return sample <= 1 || fmix64((u64)code ^ 0x9e3779b97f4a7c15ull) % sample == 0;
}

// The sampled k-mers of a mate's stop-free frames, in order, into `out` when it is not null; returns
// how many. A frame's k-mers are those of its stretches between unknown codons (for_each_kmer with a
// minimum of k).
__device__ u64 mate_amino_kmers(const u8* seq, u64 len, ProteinKmers p, u32* out) {
    u32 modulus = 1;
    for (u32 i = 1; i < p.k; ++i) modulus *= 20;
    u64 n = 0;
    for (u32 f = 0; f < 6; ++f) {
        const u64 skip = f % 3;
        const u64 codons = len > skip ? (len - skip) / 3 : 0;
        bool stop = false;
        for (u64 i = 0; i < codons && !stop; ++i) stop = frame_amino(seq, len, f, i) == AMINO_STOP;
        if (stop) continue;
        u32 code = 0, run = 0;
        for (u64 i = 0; i < codons; ++i) {
            const u32 a = frame_amino(seq, len, f, i);
            if (a == AMINO_UNKNOWN) {
                code = 0;
                run = 0;
                continue;
            }
            code = run >= p.k ? (code % modulus) * 20 + a : code * 20 + a;
            ++run;
            if (run >= p.k && keeps_amino_kmer(code, p.sample)) {
                if (out) out[n] = code;
                ++n;
            }
        }
    }
    return n;
}

// Per mate m: counts[m] = its k-mers. `counts` has mates.count + 1 items; the last stays 0, so that
// an exclusive scan's last item is the total.
extern "C" __global__ void protein_kmer_counts(Mates mates, ProteinKmers p, u64* counts) {
    for (u64 m = blockIdx.x * (u64)blockDim.x + threadIdx.x; m < mates.count; m += (u64)gridDim.x * blockDim.x) {
        counts[m] = mate_amino_kmers(mates.seq + mates.offset[m], mates.len[m], p, nullptr);
    }
}

// Per mate m: its k-mers from codes[first[m]] (first: the exclusive scan of protein_kmer_counts).
extern "C" __global__ void protein_kmers(Mates mates, ProteinKmers p, const u64* first, u32* codes) {
    for (u64 m = blockIdx.x * (u64)blockDim.x + threadIdx.x; m < mates.count; m += (u64)gridDim.x * blockDim.x) {
        mate_amino_kmers(mates.seq + mates.offset[m], mates.len[m], p, codes + first[m]);
    }
}
