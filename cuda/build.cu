// The GPU build: a fused kernel from sequence bytes to (feature, location) pairs in the bucket-list
// table (the condense kernels are in condense.cuh). Each kernel has a CPU twin:
// sketch_windows ~ Sketcher::sketch_windows, the table ~ HashMap<u32, Vec<u64>>.
#include "common.cuh"
#include "sketch.cuh"
#include "bucket_list.cuh"
#include "limits.cuh"
#include "condense.cuh"

// A batch of sequences: bytes back to back; record r has bytes [offset[r], offset[r] + len[r]),
// target `target[r]` and windows [first_window[r], first_window[r + 1]) of the batch's numbering.
struct Batch {
    const u8* seq;
    const u64* offset;
    const u32* len;
    const u32* target;
    const u64* first_window;
    u32 records;
    u64 windows;
};

struct Sketching {
    u32 k, window, stride, sketch_size;
    u64 seed;
};

// The record holding batch window `w`: the last r with first_window[r] <= w.
__device__ __forceinline__ u32 record_of(const Batch& b, u64 w) {
    u32 lo = 0, hi = b.records;
    while (hi - lo > 1) {
        u32 mid = (lo + hi) / 2;
        if (b.first_window[mid] <= w) lo = mid; else hi = mid;
    }
    return lo;
}

// Sketch of batch window `w`; returns the sketch size and sets its target and window id.
__device__ __forceinline__ int sketch_batch_window(const Batch& b, const Sketching& p, u64 w, u32* out,
                                                   u32* target, u32* window_id) {
    const u32 r = record_of(b, w);
    const u64 id = w - b.first_window[r];
    const u64 start = id * p.stride;
    u64 end = start + p.window;
    if (end > b.len[r]) end = b.len[r];
    *target = b.target[r];
    *window_id = (u32)id;
    return sketch_window(b.seq + b.offset[r], start, end, p.k, p.sketch_size, p.seed, out);
}

// Test twin of Sketcher: every window's sketch, padded with NO_FEATURE to sketch_size.
extern "C" __global__ void sketch_windows(Batch b, Sketching p, u32* features) {
    for (u64 w = blockIdx.x * (u64)blockDim.x + threadIdx.x; w < b.windows; w += (u64)gridDim.x * blockDim.x) {
        u32 sketch[MAX_SKETCH];
        u32 target, window_id;
        int n = sketch_batch_window(b, p, w, sketch, &target, &window_id);
        for (u32 j = 0; j < p.sketch_size; ++j) features[w * p.sketch_size + j] = (int)j < n ? sketch[j] : NO_FEATURE;
    }
}

// The fused build kernel: sketch each window and insert (feature, target << 32 | window) pairs.
// Blocks of AGG_THREADS threads, one window each per pass, insert their features through a shared
// tile, AGG_ITEMS features per window at a time (agg_insert). The loop is uniform across a block.
template <int G>
__device__ void build_insert(Batch b, Sketching p, Table t) {
    __shared__ AggTile tile;
    const u64 stride = (u64)gridDim.x * blockDim.x;
    PoolChunk chunk = load_chunk(t);
    for (u64 base = blockIdx.x * (u64)blockDim.x; base < b.windows; base += stride) {
        const u64 w = base + threadIdx.x;
        u32 sketch[MAX_SKETCH];
        u32 target = 0, window_id = 0;
        int n = w < b.windows ? sketch_batch_window(b, p, w, sketch, &target, &window_id) : 0;
        const u64 value = ((u64)target << 32) | window_id;
        for (u32 j0 = 0; j0 < p.sketch_size; j0 += AGG_ITEMS) {
            for (u32 x = 0; x < AGG_ITEMS; ++x) {
                const int j = (int)(j0 + x);
                tile.keys[threadIdx.x * AGG_ITEMS + x] = j < n ? sketch[j] : NO_FEATURE;
                tile.values[threadIdx.x * AGG_ITEMS + x] = value;
            }
            agg_insert<G>(t, chunk, tile);
        }
    }
    store_chunk(t, chunk);
}

// Test and benchmark entry: insert given pairs, a tile per block at a time.
template <int G>
__device__ void insert_pairs(const u32* keys, const u64* values, u64 n, Table t) {
    __shared__ AggTile tile;
    PoolChunk chunk = load_chunk(t);
    for (u64 base = blockIdx.x * (u64)AGG_TILE; base < n; base += (u64)gridDim.x * AGG_TILE) {
        for (u32 x = threadIdx.x; x < AGG_TILE; x += blockDim.x) {
            const bool in = base + x < n;
            tile.keys[x] = in ? keys[base + x] : NO_FEATURE;
            tile.values[x] = in ? values[base + x] : 0;
        }
        agg_insert<G>(t, chunk, tile);
    }
    store_chunk(t, chunk);
}

#define ENTRY_POINTS(G)                                                                             \
    extern "C" __global__ void build_insert_g##G(Batch b, Sketching p, Table t) { build_insert<G>(b, p, t); } \
    extern "C" __global__ void insert_pairs_g##G(const u32* keys, const u64* values, u64 n, Table t) {    \
        insert_pairs<G>(keys, values, n, t);                                                        \
    }
ENTRY_POINTS(1)
ENTRY_POINTS(2)
ENTRY_POINTS(4)
ENTRY_POINTS(8)
ENTRY_POINTS(16)
ENTRY_POINTS(32)

// Fills n words with v (key tables start with every slot empty).
extern "C" __global__ void fill_u32(u32* p, u64 n, u32 v) {
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) p[i] = v;
}

// Several GPUs, step 1 on the GPU that read a batch (the partition): sketch each window and sort its
// (feature, value) pairs by the GPU that owns the feature's shard (shard * gpus / 2^shard_bits:
// contiguous shard ranges), into that GPU's stretch of `keys` / `values` (capacity each). A block
// counts its pairs per owner in shared memory and reserves room once per owner, so the global
// counters see one atomic per block and owner, not one per pair. The order within a stretch is
// not fixed; the condense sorts.
#define MAX_SPLIT_GPUS 32
struct Split {
    u32* keys;
    u64* values;
    u32* counts;
    u64 capacity;
    u32 gpus;
    u32 shard_bits;
};

__device__ __forceinline__ u32 owner_of(u32 feature, const Split& s) {
    const u32 shard = shard_of_key(feature, s.shard_bits);
    return (u32)(((u64)shard * s.gpus) >> s.shard_bits);
}

extern "C" __global__ void sketch_split(Batch b, Sketching p, Split s) {
    __shared__ u32 count[MAX_SPLIT_GPUS];
    __shared__ u64 base[MAX_SPLIT_GPUS];
    const u64 stride = (u64)gridDim.x * blockDim.x;
    // The loop is uniform across the block (it synchronizes).
    for (u64 first = blockIdx.x * (u64)blockDim.x; first < b.windows; first += stride) {
        const u64 w = first + threadIdx.x;
        if (threadIdx.x < s.gpus) count[threadIdx.x] = 0;
        __syncthreads();
        u32 sketch[MAX_SKETCH];
        u32 at[MAX_SKETCH];
        u32 target = 0, window_id = 0;
        const int n = w < b.windows ? sketch_batch_window(b, p, w, sketch, &target, &window_id) : 0;
        const u64 value = ((u64)target << 32) | window_id;
        for (int j = 0; j < n; ++j) at[j] = atomicAdd(&count[owner_of(sketch[j], s)], 1u);
        __syncthreads();
        if (threadIdx.x < s.gpus) {
            base[threadIdx.x] = (u64)threadIdx.x * s.capacity + atomicAdd(&s.counts[threadIdx.x], count[threadIdx.x]);
        }
        __syncthreads();
        for (int j = 0; j < n; ++j) {
            const u64 to = base[owner_of(sketch[j], s)] + at[j];
            s.keys[to] = sketch[j];
            s.values[to] = value;
        }
        __syncthreads();
    }
}
