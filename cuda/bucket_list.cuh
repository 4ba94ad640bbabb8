// A WarpCore-style bucket-list multi-value hash table (Juenger et al. 2020), the GPU build table.
//
// Keys live in an open-addressing table probed cooperatively (COPS): a tile of G threads reads a
// window of G consecutive slots; double hashing picks the next window, and the number of windows is
// prime so the probe sequence visits them all. Each key has a 64-bit list handle, updated by CAS:
//
//   bits  0..31  offset of the tail bucket in the value pool
//   bits 32..47  values in the tail bucket
//   bits 48..61  index of the tail bucket in the key's chain (0 = first)
//   bits 62..63  state: 0 uninitialised, 1 blocked (a thread is allocating), 2 ready
//
// Values go to a pool of 8-byte slots with an atomic bump pointer. Bucket 0 of a key has s0 value
// slots; bucket i + 1 has ceil(growth * capacity(i)) (capped); a bucket after the first starts with
// a link slot holding the previous bucket's offset. Nothing is dropped silently: every failure sets
// a bit of the status word and counts the values it lost.
#pragma once
#include "common.cuh"

#define STATUS_POOL_EXHAUSTED 1u      // error: the value pool is full
#define STATUS_PROBE_LIMIT 2u         // error: no slot for a key within the probe limit (table full)
#define STATUS_POOL_OFFSET 4u         // error: the pool passed 2^32 slots
#define STATUS_MAX_BUCKETS 8u         // warning: a key reached the longest chain

#define HANDLE_UNINIT 0ull
#define HANDLE_BLOCKED 1ull
#define HANDLE_READY 2ull
#define MAX_BUCKET_INDEX 16383u
#define MAX_BUCKET_CAPACITY 65535u

struct Table {
    u32* keys;           // capacity slots, NO_FEATURE = empty
    u64* handles;        // capacity handles, 0 = uninitialised
    u64* pool;           // value slots
    u64* pool_top;       // bump pointer (slots used)
    u32* status;         // status word
    u64* lost;           // values that could not be stored
    u64* chunks;         // each thread's pool chunk (cur, end), kept across launches
    u64 pool_capacity;   // value slots
    u32 windows;         // probing windows (prime); capacity = windows * group
    u32 max_probes;      // windows visited before giving up
    u32 s0;              // first bucket's value slots
    u32 growth_num, growth_den;  // bucket growth factor as a fraction
    u32 chunk;           // pool slots a thread takes at a time
    u32 max_threads;     // threads `chunks` has room for
};

__device__ __forceinline__ u32 bucket_capacity(const Table& t, u32 index) {
    u64 cap = t.s0;
    for (u32 i = 0; i < index && cap < MAX_BUCKET_CAPACITY; ++i)
        cap = (cap * t.growth_num + t.growth_den - 1) / t.growth_den;
    return cap < MAX_BUCKET_CAPACITY ? (u32)cap : MAX_BUCKET_CAPACITY;
}

__device__ __forceinline__ u32 mix32(u32 h) {
    h ^= h >> 16; h *= 0x85ebca6bu; h ^= h >> 13; h *= 0xc2b2ae35u; return h ^ (h >> 16);
}

__device__ __forceinline__ u64 make_handle(u64 state, u32 index, u32 count, u32 offset) {
    return (state << 62) | ((u64)index << 48) | ((u64)count << 32) | offset;
}

// Each thread takes pool slots from the shared bump pointer `chunk` at a time: one global atomic per
// chunk instead of one per bucket (a single contended address otherwise caps inserts near 1 G/s).
// A thread's unused stretch is kept in `chunks` between launches, so at most one chunk per thread
// is ever wasted; the host reserves that room in the pool.

// A thread's private stretch of pool slots.
struct PoolChunk {
    u64 cur, end;
};

__device__ __forceinline__ PoolChunk load_chunk(const Table& t) {
    const u64 id = blockIdx.x * (u64)blockDim.x + threadIdx.x;
    PoolChunk c = {0, 0};
    if (id < t.max_threads) c = PoolChunk{t.chunks[2 * id], t.chunks[2 * id + 1]};
    return c;
}

__device__ __forceinline__ void store_chunk(const Table& t, const PoolChunk& c) {
    const u64 id = blockIdx.x * (u64)blockDim.x + threadIdx.x;
    if (id < t.max_threads) {
        t.chunks[2 * id] = c.cur;
        t.chunks[2 * id + 1] = c.end;
    }
}

// Hands out `n` consecutive pool slots; 0 if the pool is full, else STATUS_POOL_* bits.
__device__ __forceinline__ u32 pool_alloc(const Table& t, PoolChunk& c, u64 n, u64* off) {
    if (c.cur + n > c.end) {
        const u64 want = n > t.chunk ? n : t.chunk;
        const u64 o = atomicAdd(t.pool_top, want);
        if (o + want > t.pool_capacity) return STATUS_POOL_EXHAUSTED;
        if (o + want > 0xFFFFFFFFull) return STATUS_POOL_OFFSET;
        c.cur = o;
        c.end = o + want;
    }
    *off = c.cur;
    c.cur += n;
    return 0;
}

__device__ __forceinline__ void fail(const Table& t, u32 bit, u32 values) {
    atomicOr(t.status, bit);
    atomicAdd(t.lost, (u64)values);
}

// Reserves room for up to `want` values in the list of the key in `slot` (one thread): returns how
// many it reserved (at least 1), at pool positions *pos, *pos + 1, ..., or 0 if the values are lost
// (counted in the status word). Reservations stay within one bucket.
__device__ u32 reserve_values(const Table& t, PoolChunk& chunk, u32 slot, u32 want, u64* pos) {
    u64* hp = &t.handles[slot];
    while (true) {
        u64 h = atomicAdd(hp, 0ull);
        u64 state = h >> 62;
        if (state == HANDLE_BLOCKED) {
            __nanosleep(20);
            continue;
        }
        if (state == HANDLE_UNINIT) {
            if (atomicCAS(hp, h, make_handle(HANDLE_BLOCKED, 0, 0, 0)) != h) continue;
            u64 off;
            if (u32 err = pool_alloc(t, chunk, t.s0, &off)) {
                atomicExch(hp, h);
                fail(t, err, want);
                return 0;
            }
            const u32 got = want < t.s0 ? want : t.s0;
            __threadfence();
            atomicExch(hp, make_handle(HANDLE_READY, 0, got, (u32)off));
            *pos = off;
            return got;
        }
        u32 tail = (u32)h;
        u32 count = (u32)(h >> 32) & 0xFFFFu;
        u32 index = (u32)(h >> 48) & 0x3FFFu;
        const u32 cap = bucket_capacity(t, index);
        if (count < cap) {
            const u32 got = want < cap - count ? want : cap - count;
            if (atomicCAS(hp, h, h + ((u64)got << 32)) != h) continue;
            *pos = tail + (index > 0 ? 1 : 0) + count;
            return got;
        }
        if (index == MAX_BUCKET_INDEX) {
            fail(t, STATUS_MAX_BUCKETS, want);
            return 0;
        }
        if (atomicCAS(hp, h, (h & ~(3ull << 62)) | (HANDLE_BLOCKED << 62)) != h) continue;
        const u32 next = bucket_capacity(t, index + 1);
        u64 off;
        if (u32 err = pool_alloc(t, chunk, (u64)next + 1, &off)) {
            atomicExch(hp, h);
            fail(t, err, want);
            return 0;
        }
        const u32 got = want < next ? want : next;
        t.pool[off] = tail;
        __threadfence();
        atomicExch(hp, make_handle(HANDLE_READY, index + 1, got, (u32)off));
        *pos = off + 1;
        return got;
    }
}

// Appends one value (one thread).
__device__ __forceinline__ void append_value(const Table& t, PoolChunk& chunk, u32 slot, u64 value) {
    u64 pos;
    if (reserve_values(t, chunk, slot, 1, &pos)) t.pool[pos] = value;
}

// Finds or claims the slots of keys held by the threads of a tile of G threads (G = 1, 2, 4, 8, 16
// or 32) and reserves room for `want` values each. Every thread of the warp must call this
// together; threads without a key pass has_key = false. The tile takes its members' keys one at a
// time: it probes for the key together, then the owner reserves. The owner gets the slot (or
// NO_FEATURE when the table is full), the first reserved position and the number reserved.
template <int G>
__device__ void tile_reserve(const Table& t, PoolChunk& chunk, bool has_key, u32 key, u32 want, u32* out_slot,
                             u64* out_pos, u32* out_got) {
    const u32 lane = threadIdx.x & 31u;
    const u32 rank = lane % G;
    const u32 tile_mask = (G == 32) ? 0xFFFFFFFFu : (((1u << G) - 1u) << (lane - rank));
    u32 pending = __ballot_sync(0xFFFFFFFFu, has_key) & tile_mask;
    *out_slot = NO_FEATURE;
    *out_got = 0;
    while (pending) {
        const u32 leader = __ffs(pending) - 1;
        pending &= pending - 1;
        const u32 k = __shfl_sync(tile_mask, key, leader);
        const u32 h1 = mix32(k ^ 0x9e3779b9u) % t.windows;
        const u32 h2 = 1 + mix32(k ^ 0x7f4a7c15u) % (t.windows > 1 ? t.windows - 1 : 1);
        u32 slot = NO_FEATURE;
        u32 w = h1;
        for (u32 probe = 0; probe < t.max_probes && slot == NO_FEATURE;) {
            const u32 my_slot = w * G + rank;
            const u32 seen = t.keys[my_slot];
            const u32 found = __ballot_sync(tile_mask, seen == k) & tile_mask;
            if (found) {
                slot = (w * G) + (__ffs(found) - 1 - (lane - rank));
                break;
            }
            const u32 empty = __ballot_sync(tile_mask, seen == NO_FEATURE) & tile_mask;
            if (empty) {
                const u32 first = __ffs(empty) - 1;
                u32 old = 0;
                if (lane == first) old = atomicCAS(&t.keys[my_slot], NO_FEATURE, k);
                old = __shfl_sync(tile_mask, old, first);
                if (old == NO_FEATURE || old == k) {
                    slot = w * G + (first - (lane - rank));
                    break;
                }
                continue;  // another key took the slot: read the window again
            }
            w = (w + h2) % t.windows;
            ++probe;
        }
        if (lane == leader) {
            *out_slot = slot;
            if (slot == NO_FEATURE) fail(t, STATUS_PROBE_LIMIT, want);
            else *out_got = reserve_values(t, chunk, slot, want, out_pos);
        }
        __syncwarp(tile_mask);
    }
}

// Inserts each thread's (key, value), if has_item. Lanes of a warp with the same key are served by
// one representative, which probes once and reserves room for all of them with one CAS (a hot key
// would otherwise serialize every value on its list handle); lanes beyond the reservation (a
// bucket boundary) append one by one. Every thread of the warp must call this together.
template <int G>
__device__ void warp_insert(const Table& t, PoolChunk& chunk, bool has_item, u32 key, u64 value) {
    const u32 lane = threadIdx.x & 31u;
    const u32 active = __ballot_sync(0xFFFFFFFFu, has_item);
    u32 peers = 0;
    if (has_item) peers = __match_any_sync(active, key);
    const u32 rep_lane = has_item ? __ffs(peers) - 1 : lane;
    const bool rep = has_item && rep_lane == lane;
    u32 slot, got;
    u64 pos = 0;
    tile_reserve<G>(t, chunk, rep, key, rep ? __popc(peers) : 0, &slot, &pos, &got);
    const u32 r_slot = __shfl_sync(0xFFFFFFFFu, slot, rep_lane);
    const u64 r_pos = __shfl_sync(0xFFFFFFFFu, pos, rep_lane);
    const u32 r_got = __shfl_sync(0xFFFFFFFFu, got, rep_lane);
    if (!has_item || r_slot == NO_FEATURE || r_got == 0) return;  // lost values were counted
    const u32 my_rank = __popc(peers & ((1u << lane) - 1u));
    if (my_rank < r_got) t.pool[r_pos + my_rank] = value;
    else append_value(t, chunk, r_slot, value);
}

// Block-level aggregation. A key with many values (a repeat in a genome, the head of a skewed
// distribution) would otherwise take one handle update per value, all of them serialized on its
// list handle across the GPU. A block instead gathers a tile of pairs in shared memory, sorts it by
// key, and reserves each run of equal keys with one probe and one handle update per bucket.
#define AGG_THREADS 256
#define AGG_ITEMS 8
#define AGG_TILE (AGG_THREADS * AGG_ITEMS)

struct AggTile {
    u32 keys[AGG_TILE];  // NO_FEATURE: no pair
    u64 values[AGG_TILE];
};

// Sorts the tile by key (bitonic network; blockDim.x threads).
__device__ void agg_sort(AggTile& s) {
    for (u32 size = 2; size <= AGG_TILE; size <<= 1) {
        for (u32 stride = size / 2; stride > 0; stride >>= 1) {
            __syncthreads();
            for (u32 p = threadIdx.x; p < AGG_TILE / 2; p += blockDim.x) {
                const u32 i = 2 * p - (p & (stride - 1));
                const u32 j = i + stride;
                const u32 ki = s.keys[i], kj = s.keys[j];
                if ((ki > kj) == ((i & size) == 0)) {
                    s.keys[i] = kj;
                    s.keys[j] = ki;
                    const u64 v = s.values[i];
                    s.values[i] = s.values[j];
                    s.values[j] = v;
                }
            }
        }
    }
    __syncthreads();
}

// Sorts the tile and inserts it: the first pair of each run of equal keys reserves for the run.
// Every thread of the block must call this together.
template <int G>
__device__ void agg_insert(const Table& t, PoolChunk& chunk, AggTile& s) {
    agg_sort(s);
    for (u32 i = threadIdx.x; i < AGG_TILE; i += blockDim.x) {
        const u32 key = s.keys[i];
        const bool start = key != NO_FEATURE && (i == 0 || s.keys[i - 1] != key);
        u32 len = 0;
        if (start)
            while (i + len < AGG_TILE && s.keys[i + len] == key) ++len;
        u32 slot, got;
        u64 pos = 0;
        tile_reserve<G>(t, chunk, start, key, len, &slot, &pos, &got);
        if (!start || slot == NO_FEATURE) continue;  // lost values were counted
        for (u32 done = 0; got > 0;) {
            for (u32 x = 0; x < got; ++x) t.pool[pos + x] = s.values[i + done + x];
            done += got;
            if (done == len) break;
            got = reserve_values(t, chunk, slot, len - done, &pos);  // the next bucket
        }
    }
    __syncthreads();  // the tile is refilled next
}

// Number of values stored for the key in `slot`.
__device__ __forceinline__ u64 list_length(const Table& t, u32 slot) {
    u64 h = t.handles[slot];
    if ((h >> 62) != HANDLE_READY) return 0;
    u32 index = (u32)(h >> 48) & 0x3FFFu;
    u64 n = (h >> 32) & 0xFFFFu;
    for (u32 i = 0; i < index; ++i) n += bucket_capacity(t, i);
    return n;
}

// Calls f(value) for every value of the key in `slot`, tail bucket first.
template <typename F>
__device__ void for_each_value(const Table& t, u32 slot, F f) {
    u64 h = t.handles[slot];
    if ((h >> 62) != HANDLE_READY) return;
    u32 index = (u32)(h >> 48) & 0x3FFFu;
    u32 count = (u32)(h >> 32) & 0xFFFFu;
    u32 off = (u32)h;
    while (true) {
        const u64* values = t.pool + off + (index > 0 ? 1 : 0);
        for (u32 i = 0; i < count; ++i) f(values[i]);
        if (index == 0) break;
        off = (u32)t.pool[off];
        --index;
        count = bucket_capacity(t, index);
    }
}

// The host builds these arguments as Rust structs, which assert the same sizes.
static_assert(sizeof(Table) == 96, "struct Table must match TableArgs in crates/kmerdb-gpu/src/gpu/table.rs");
