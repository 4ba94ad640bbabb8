// Shared definitions of kmerdb's kernels. NVRTC has no standard headers, so the kernels use their
// own fixed-width integer names. The host concatenates the files in the order of their #include
// lines (crates/kmerdb-gpu/src/gpu/kernels.rs), so each file may rely only on what it includes.
#pragma once

typedef unsigned char u8;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef long long i64;

// The shard of a feature among 2^shard_bits: its low bits (crates/kmerdb-core/src/index/format.rs shard_of).
__device__ __forceinline__ u32 shard_of_key(u32 key, u32 shard_bits) {
    return key & (u32)((1ull << shard_bits) - 1);
}

// Marks "no k-mer" and an empty key slot; never a feature (see crates/kmerdb-core/src/sketch.rs).
#define NO_FEATURE 0xFFFFFFFFu
