// `kmerdb update --gpus`: the old index's shards, as stored, expanded on the GPU into the pairs
// that the condense takes, (feature, old target << 32 | window). The host twin is the first loop
// of Shards::provisional_pairs (src/indexing/update_on_gpu.rs); tests/gpu.rs compares the index
// bytes the two give.
#pragma once
#include "classify.cuh"

// Whether slot s of bucket b is one PackedKeys::slots lists: occupied, and no empty slot before it
// (the writer never leaves one; a damaged index may, and then the CPU stops there too).
__device__ __forceinline__ bool slot_listed(const ShardKeys& k, u64 b, u32 s) {
    for (u32 i = 0; i <= s; ++i) {
        if (slot_tag(k, b, i) == 0) return false;
    }
    return true;
}

// The length of the list of each of shard `shard`'s n slots (0 for an empty slot).
extern "C" __global__ void old_list_lengths(DeviceIndex ix, u32 shard, u64 n, u64* lens) {
    const ShardKeys k = shard_keys(ix, shard);
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        const u64 b = i / BUCKET_SLOTS;
        const u32 s = (u32)(i % BUCKET_SLOTS);
        lens[i] = !slot_listed(k, b, s) ? 0 : decode_list(ix, shard, slot_list(k, b, s, slot_code(k, b, s))).len;
    }
}

// Slot i's locations as pairs from first[i] on: its key (named by its bucket and tag, PackedKeys::slots),
// and target << 32 | window.
extern "C" __global__ void expand_old_lists(DeviceIndex ix, u32 shard, u64 n, const u64* first, u32* keys,
                                            u64* values) {
    const ShardKeys k = shard_keys(ix, shard);
    const u64 window_mask = (1ull << ix.window_bits) - 1;
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        const u64 b = i / BUCKET_SLOTS;
        const u32 s = (u32)(i % BUCKET_SLOTS);
        if (!slot_listed(k, b, s)) continue;
        const u64 tag = slot_tag(k, b, s);
        // A tag with hash bits 0 comes only from a damaged index (packed_keys.rs KeyCode::key).
        const int j = (int)((tag & 3) ? (tag & 3) : 1) - 1;
        const u32 h = (u32)((tag >> 2) * k.buckets + b);
        const u32 key = (unpermute(h, j, ix.shard_bits) << ix.shard_bits) | shard;
        const List l = decode_list(ix, shard, slot_list(k, b, s, slot_code(k, b, s)));
        Cursor c = {0, 0, 0, 0};
        for (u32 x = 0; x < l.len; ++x) {
            const u64 loc = list_next(ix, l, c);
            keys[first[i] + x] = key;
            values[first[i] + x] = ((loc >> ix.window_bits) << 32) | (loc & window_mask);
        }
    }
}
