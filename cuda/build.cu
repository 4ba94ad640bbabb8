// The GPU build (crates/kmerdb-gpu/src/gpu/passes.rs): sequence bytes to packed (feature, global window) pairs
// split by owner GPU (sketch_split), each pass's pairs to the bucket-list table (select_pass,
// insert_pairs), and the sort of pairs kept off the GPU by shard (count_shards, scatter_by_shard);
// the condense kernels are in condense.cuh. Each kernel has a CPU twin: sketch_windows ~
// Sketcher::sketch_windows, the table ~ HashMap<u32, Vec<u64>>, the pair kernels ~ the CPU's
// sketching into (feature, global window) pairs (tests/gpu.rs).
#include "common.cuh"
#include "sketch.cuh"
#include "bucket_list.cuh"
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

// The build in passes (crates/kmerdb-gpu/src/gpu/passes.rs). Pairs travel packed in 64 bits: the feature in the low
// half, the window's global number (its target's first window, counted over every target read,
// plus the window's index in the target) in the high half; a key of NO_FEATURE marks no pair.
__device__ __forceinline__ u64 pack_pair(u32 feature, u32 global_window) {
    return (u64)feature | ((u64)global_window << 32);
}

// Step 1, on the GPU that read a batch: sketch each window and put its pairs into the stretch of
// the GPU that owns the feature's shard (owner = shard % gpus: every pass, a range of shards, then
// has work for every GPU), at owner * capacity + a position taken from owner_counts; and count
// the pairs of each shard into shard_counts (kept across batches). A block counts in shared
// memory and reserves room once per owner, so the global counters see one atomic per block and
// owner. The order within a stretch is not fixed: the condense sorts.
#define MAX_SPLIT_GPUS 32
#define MAX_SHARDS 64
struct Split {
    u64* pairs;            // gpus stretches of `capacity` packed pairs
    u32* owner_counts;     // pairs per owner in this batch
    u64* shard_counts;     // pairs per shard, accumulated
    const u64* global_first;  // per record: global number of its target's first window
    u64 capacity;
    u32 gpus;
    u32 shard_bits;
};

extern "C" __global__ void sketch_split(Batch b, Sketching p, Split s) {
    __shared__ u32 count[MAX_SPLIT_GPUS];
    __shared__ u64 base[MAX_SPLIT_GPUS];
    __shared__ u32 shard_count[MAX_SHARDS];
    const u32 shards = 1u << s.shard_bits;
    for (u32 i = threadIdx.x; i < shards; i += blockDim.x) shard_count[i] = 0;
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
        const u32 global = n > 0 ? (u32)(s.global_first[record_of(b, w)] + window_id) : 0;
        for (int j = 0; j < n; ++j) {
            const u32 shard = shard_of_key(sketch[j], s.shard_bits);
            at[j] = atomicAdd(&count[shard % s.gpus], 1u);
            atomicAdd(&shard_count[shard], 1u);
        }
        __syncthreads();
        if (threadIdx.x < s.gpus) {
            base[threadIdx.x] = (u64)threadIdx.x * s.capacity + atomicAdd(&s.owner_counts[threadIdx.x], count[threadIdx.x]);
        }
        __syncthreads();
        for (int j = 0; j < n; ++j) {
            const u32 owner = shard_of_key(sketch[j], s.shard_bits) % s.gpus;
            s.pairs[base[owner] + at[j]] = pack_pair(sketch[j], global);
        }
        __syncthreads();
    }
    for (u32 i = threadIdx.x; i < shards; i += blockDim.x)
        if (shard_count[i]) atomicAdd(&s.shard_counts[i], (u64)shard_count[i]);
}

// The targets' first global windows, ascending (the provisional targets in the order they were
// read), to turn a global window back into (target, window in the target).
struct Windows {
    const u32* first;
    u32 targets;
};

// The table's value of a global window: target << 32 | window in the target (as the CPU's
// WindowMap::locate finds it, before renumbering).
__device__ __forceinline__ u64 table_value(const Windows& m, u32 global) {
    u32 lo = 0, hi = m.targets;  // the last target whose first window is <= global
    while (hi - lo > 1) {
        const u32 mid = (lo + hi) / 2;
        if (m.first[mid] <= global) lo = mid; else hi = mid;
    }
    return ((u64)lo << 32) | (global - m.first[lo]);
}

// Step 2, each pass: the pairs of a stored block whose shard is in [lo, hi), as table keys and
// values, packed densely into keys/values at positions taken from *n (one atomic per block).
extern "C" __global__ void select_pass(const u64* pairs, u64 count, u32 lo, u32 hi, u32 shard_bits, Windows m,
                                       u32* keys, u64* values, u64* n) {
    __shared__ u32 block_count;
    __shared__ u64 block_base;
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 first = blockIdx.x * (u64)blockDim.x; first < count; first += stride) {
        if (threadIdx.x == 0) block_count = 0;
        __syncthreads();
        const u64 i = first + threadIdx.x;
        u64 pair = 0;
        bool keep = false;
        if (i < count) {
            pair = pairs[i];
            const u32 key = (u32)pair;
            const u32 shard = shard_of_key(key, shard_bits);
            keep = key != NO_FEATURE && shard >= lo && shard < hi;
        }
        u32 at = 0;
        if (keep) at = atomicAdd(&block_count, 1u);
        __syncthreads();
        if (threadIdx.x == 0) block_base = atomicAdd(n, (u64)block_count);
        __syncthreads();
        if (keep) {
            keys[block_base + at] = (u32)pair;
            values[block_base + at] = table_value(m, (u32)(pair >> 32));
        }
        __syncthreads();
    }
}

// Pairs of a block sorted by shard, for blocks kept in host memory or spill files (a pass then
// copies only its shards' stretch). count_shards counts each shard's pairs; scatter_by_shard puts
// each pair at a place taken from its shard's cursor (cursors start at the shards' first places:
// the exclusive scan of the counts, done by the host).
extern "C" __global__ void count_shards(const u64* pairs, u64 count, u32 shard_bits, u64* counts) {
    __shared__ u32 local[MAX_SHARDS];
    const u32 shards = 1u << shard_bits;
    for (u32 i = threadIdx.x; i < shards; i += blockDim.x) local[i] = 0;
    __syncthreads();
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < count; i += (u64)gridDim.x * blockDim.x) {
        const u32 key = (u32)pairs[i];
        if (key != NO_FEATURE) atomicAdd(&local[shard_of_key(key, shard_bits)], 1u);
    }
    __syncthreads();
    for (u32 i = threadIdx.x; i < shards; i += blockDim.x)
        if (local[i]) atomicAdd(&counts[i], (u64)local[i]);
}

extern "C" __global__ void scatter_by_shard(const u64* pairs, u64 count, u32 shard_bits, u64* cursors, u64* out) {
    __shared__ u32 local[MAX_SHARDS];
    __shared__ u64 base[MAX_SHARDS];
    const u32 shards = 1u << shard_bits;
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 first = blockIdx.x * (u64)blockDim.x; first < count; first += stride) {
        for (u32 i = threadIdx.x; i < shards; i += blockDim.x) local[i] = 0;
        __syncthreads();
        const u64 i = first + threadIdx.x;
        const u64 pair = i < count ? pairs[i] : (u64)NO_FEATURE;
        const u32 key = (u32)pair;
        const u32 shard = shard_of_key(key, shard_bits);
        u32 at = 0;
        if (key != NO_FEATURE) at = atomicAdd(&local[shard], 1u);
        __syncthreads();
        for (u32 x = threadIdx.x; x < shards; x += blockDim.x)
            if (local[x]) base[x] = atomicAdd(&cursors[x], (u64)local[x]);
        __syncthreads();
        if (key != NO_FEATURE) out[base[shard] + at] = pair;
        __syncthreads();
    }
}

// The host builds these arguments as Rust structs, which assert the same sizes.
static_assert(sizeof(Batch) == 56, "struct Batch must match BatchArgs in crates/kmerdb-gpu/src/gpu/build.rs");
static_assert(sizeof(Sketching) == 24, "struct Sketching must match SketchArgs in crates/kmerdb-gpu/src/gpu/build.rs");
static_assert(sizeof(Split) == 48, "struct Split must match SplitArgs in crates/kmerdb-gpu/src/gpu/passes.rs");
static_assert(sizeof(Windows) == 16, "struct Windows must match WindowsArgs in crates/kmerdb-gpu/src/gpu/passes.rs");
