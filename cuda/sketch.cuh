// K-mers and minhash sketches of windows: the device twin of crates/kmerdb-core/src/sketch.rs, bit for bit.
#pragma once
#include "common.cuh"

// The sketch size kernels are compiled for; SketchParams::sketch_size is at most this.
#define MAX_SKETCH 64

// 2-bit code of a base, or 4 for anything that is not A, C, G, T or U (either case).
__device__ __forceinline__ u32 encode_base(u8 b) {
    switch (b) {
    case 'A': case 'a': return 0;
    case 'C': case 'c': return 1;
    case 'G': case 'g': return 2;
    case 'T': case 't': case 'U': case 'u': return 3;
    default: return 4;
    }
}

// murmur3's 64-bit finalizer.
__device__ __forceinline__ u64 fmix64(u64 x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

// Hash function 1 of the index format: upper 32 bits of fmix64(canonical ^ seed), NO_FEATURE folded.
__device__ __forceinline__ u32 hash_kmer(u64 canonical, u64 seed) {
    u32 h = (u32)(fmix64(canonical ^ seed) >> 32);
    return h == NO_FEATURE ? NO_FEATURE - 1 : h;
}

// The `s` smallest distinct feature values of the k-mers in bases [start, end) of `seq`, ascending,
// into `out`; returns how many (fewer when the window has fewer valid k-mers).
__device__ int sketch_window(const u8* seq, u64 start, u64 end, u32 k, u32 s, u64 seed, u32* out) {
    const u64 mask = k == 32 ? ~0ull : ((1ull << (2 * k)) - 1);
    const u32 rc_shift = 2 * (k - 1);
    u64 fwd = 0, rev = 0;
    u32 valid = 0;
    int n = 0;
    for (u64 i = start; i < end; ++i) {
        u32 c = encode_base(seq[i]);
        if (c > 3) {
            valid = 0;
        } else {
            fwd = ((fwd << 2) | c) & mask;
            rev = (rev >> 2) | ((u64)(3 - c) << rc_shift);
            ++valid;
        }
        if (valid < k) continue;
        u32 h = hash_kmer(fwd < rev ? fwd : rev, seed);
        if (n == (int)s && h >= out[n - 1]) continue;
        int pos = n;
        while (pos > 0 && out[pos - 1] > h) --pos;
        if (pos > 0 && out[pos - 1] == h) continue;
        if (n < (int)s) ++n;
        for (int j = n - 1; j > pos; --j) out[j] = out[j - 1];
        out[pos] = h;
    }
    return n;
}
