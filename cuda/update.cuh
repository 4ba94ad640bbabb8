// `kmerdb update --gpus`: the old index's shards, as stored, expanded on the GPU into the pairs
// that the condense takes, (feature, old target << 32 | window). The host twin is the first loop
// of Shards::provisional_pairs (src/indexing/update_on_gpu.rs); tests/gpu.rs compares the index
// bytes the two give.
#pragma once
#include "classify.cuh"

// The length of the list of each of shard `shard`'s n slots (0 for an empty slot).
extern "C" __global__ void old_list_lengths(DeviceIndex ix, u32 shard, u64 n, u64* lens) {
    const u64* slots = (const u64*)ix.slot_base[shard];
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        const u64 w = slots[i];
        lens[i] = (u32)w == NO_FEATURE ? 0 : decode_list(ix, shard, (u32)(w >> 32)).len;
    }
}

// Slot i's locations as pairs from first[i] on: its key, and target << 32 | window.
extern "C" __global__ void expand_old_lists(DeviceIndex ix, u32 shard, u64 n, const u64* first, u32* keys,
                                            u64* values) {
    const u64* slots = (const u64*)ix.slot_base[shard];
    const u64 window_mask = (1ull << ix.window_bits) - 1;
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        const u64 w = slots[i];
        if ((u32)w == NO_FEATURE) continue;
        const List l = decode_list(ix, shard, (u32)(w >> 32));
        Cursor c = {0, 0, 0, 0};
        for (u32 k = 0; k < l.len; ++k) {
            const u64 loc = list_next(ix, l, c);
            keys[first[i] + k] = (u32)w;
            values[first[i] + k] = ((loc >> ix.window_bits) << 32) | (loc & window_mask);
        }
    }
}
