// A slab-list dynamic multi-value hash table after SlabHash (Ashkiani, Farach-Colton and Owens,
// "A Dynamic Hash Table for the GPU", IPDPS 2018): concurrent insertions, deletions and searches
// of (key, value) pairs, a warp working on one operation at a time. Its CPU twin, which gives the
// same bytes for the same operations done one after another, is crates/kmerdb-core/src/slab_hash.rs.
//
// Each bucket is a list of slabs. A slab is 32 words (128 bytes, one cache line), one per lane of
// a warp: words 0..29 hold 15 pairs (key at an even word, its value in the next), word 30 is
// unused and word 31 points to the next slab (an index into the pool, SLAB_NULL at the end). A
// warp reads a whole slab in one coalesced load and decides with one ballot.
//
// Keys are any u32 but SLAB_EMPTY (the index's NO_FEATURE). Values are below SLAB_DELETED. An
// empty pair is all ones and is filled by one 64-bit CAS, so a pair is never half written; a
// deleted pair keeps its key and gets the value SLAB_DELETED (a tombstone: insertions never reuse
// it, so a search running beside a deletion sees the pair or its tombstone, never another pair).
//
// The slab allocator is the paper's SlabAlloc in one level: the pool is cut into memory blocks of
// 1024 slabs, each with a bitmap of 32 words; each warp keeps a resident block, picked by a hash
// of its warp id and an attempt counter, and takes a free slab with one ballot over the bitmap's
// words and one atomicOr. A full block makes the warp hash to another; after SLAB_MAX_ATTEMPTS
// full blocks the operation fails with STATUS_SLAB_POOL_EXHAUSTED. Nothing is lost silently:
// every operation writes its result, and every failure sets a bit of the status word.
#pragma once
#include "common.cuh"

#define SLAB_WORDS 32
#define SLAB_PAIRS 15
#define SLAB_NEXT_WORD 31
#define SLAB_EMPTY 0xFFFFFFFFu
#define SLAB_DELETED 0xFFFFFFFEu
#define SLAB_NULL 0xFFFFFFFFu
#define SLAB_BLOCK_SLABS 1024
#define SLAB_MAX_ATTEMPTS 64
// Lanes that hold a key: the even lanes below word 30.
#define SLAB_KEY_LANES 0x15555555u

#define SLAB_INSERT 0u
#define SLAB_DELETE 1u
#define SLAB_SEARCH 2u

#define STATUS_SLAB_POOL_EXHAUSTED 1u  // an insertion found no free slab: its pair is not stored
#define STATUS_SLAB_BAD_PAIR 2u        // a key SLAB_EMPTY or a value >= SLAB_DELETED was refused
#define STATUS_SLAB_BAD_OP 4u          // an operation code other than the three

struct SlabTable {
    u32* buckets;        // bucket_count base slabs, 32 words each
    u32* pool;           // block_count * SLAB_BLOCK_SLABS slabs
    u32* bitmaps;        // 32 words per memory block: bit b of word w = slab w * 32 + b is taken
    u32* status;         // status word
    u32 bucket_count;
    u32 block_count;
    u32 seed;            // of the bucket hash
    u32 _pad;
};

// The bucket of a key: a 32-bit mix, then a multiply-shift into [0, bucket_count).
__device__ __forceinline__ u32 slab_bucket(const SlabTable& t, u32 key) {
    u32 h = key ^ t.seed;
    h ^= h >> 16; h *= 0x7feb352du; h ^= h >> 15; h *= 0x846ca68bu; h ^= h >> 16;
    return (u32)(((u64)h * t.bucket_count) >> 32);
}

// The memory block a warp tries on its `attempt`th try.
__device__ __forceinline__ u32 slab_resident_block(const SlabTable& t, u32 warp, u32 attempt) {
    u32 h = warp * 0x9e3779b9u + attempt * 0x85ebca6bu;
    h ^= h >> 15; h *= 0x2c1b3c6du; h ^= h >> 12;
    return (u32)(((u64)h * t.block_count) >> 32);
}

__device__ __forceinline__ u32* slab_at(const SlabTable& t, u32 bucket, u32 ptr) {
    return ptr == SLAB_NULL ? t.buckets + (u64)bucket * SLAB_WORDS : t.pool + (u64)ptr * SLAB_WORDS;
}

// This lane's word of a slab, read past the caches that another warp's CAS does not update.
__device__ __forceinline__ u32 slab_word(const u32* slab, u32 lane) {
    return *(volatile const u32*)(slab + lane);
}

// A free slab of the pool, its words set to all ones, for the whole warp; SLAB_NULL if the pool
// is full. `resident` and `attempt` are the warp's allocator state, kept across its operations.
__device__ u32 slab_allocate(const SlabTable& t, u32 warp, u32 lane, u32& resident, u32& attempt) {
    while (attempt < SLAB_MAX_ATTEMPTS) {
        u32* bitmap = t.bitmaps + (u64)resident * 32;
        const u32 word = slab_word(bitmap, lane);
        const u32 has_free = __ballot_sync(0xFFFFFFFFu, word != 0xFFFFFFFFu);
        if (has_free == 0) {
            ++attempt;
            resident = slab_resident_block(t, warp, attempt);
            continue;
        }
        const u32 leader = __ffs(has_free) - 1;
        u32 got = SLAB_NULL;
        if (lane == leader) {
            const u32 bit = __ffs(~word) - 1;
            const u32 old = atomicOr(bitmap + lane, 1u << bit);
            if ((old & (1u << bit)) == 0) got = resident * SLAB_BLOCK_SLABS + lane * 32 + bit;
        }
        got = __shfl_sync(0xFFFFFFFFu, got, leader);
        if (got != SLAB_NULL) {
            t.pool[(u64)got * SLAB_WORDS + lane] = SLAB_EMPTY;
            __threadfence();
            return got;
        }
    }
    return SLAB_NULL;
}

// Gives a slab back (one lane calls it).
__device__ __forceinline__ void slab_free(const SlabTable& t, u32 ptr) {
    atomicAnd(t.bitmaps + (u64)(ptr / SLAB_BLOCK_SLABS) * 32 + (ptr % SLAB_BLOCK_SLABS) / 32, ~(1u << (ptr % 32)));
}

// Stores (key, value) in the first empty pair of the key's bucket, adding a slab where all are
// taken. Returns 1 if stored, 0 if the pool is full.
__device__ u32 slab_insert(const SlabTable& t, u32 warp, u32 lane, u32 key, u32 value, u32& resident, u32& attempt) {
    const u32 bucket = slab_bucket(t, key);
    u32 ptr = SLAB_NULL;
    while (true) {
        u32* slab = slab_at(t, bucket, ptr);
        const u32 word = slab_word(slab, lane);
        const u32 empty = __ballot_sync(0xFFFFFFFFu, word == SLAB_EMPTY) & SLAB_KEY_LANES;
        if (empty != 0) {
            const u32 leader = __ffs(empty) - 1;
            u32 stored = 0;
            if (lane == leader) {
                const u64 pair = (u64)value << 32 | key;
                stored = atomicCAS((u64*)(slab + lane), 0xFFFFFFFFFFFFFFFFull, pair) == 0xFFFFFFFFFFFFFFFFull;
            }
            if (__shfl_sync(0xFFFFFFFFu, stored, leader)) return 1;
            continue;  // another warp took the pair first: read the slab again
        }
        const u32 next = __shfl_sync(0xFFFFFFFFu, word, SLAB_NEXT_WORD);
        if (next != SLAB_NULL) {
            ptr = next;
            continue;
        }
        const u32 fresh = slab_allocate(t, warp, lane, resident, attempt);
        if (fresh == SLAB_NULL) return 0;
        u32 linked = 0;
        if (lane == SLAB_NEXT_WORD) {
            linked = atomicCAS(slab + SLAB_NEXT_WORD, SLAB_NULL, fresh) == SLAB_NULL;
            if (!linked) slab_free(t, fresh);
        }
        linked = __shfl_sync(0xFFFFFFFFu, linked, SLAB_NEXT_WORD);
        if (linked) ptr = fresh;
        // Otherwise another warp linked a slab first: read this one again and follow its link.
    }
}

// Marks one live pair (key, value) deleted. Returns 1 if there was one, 0 if not.
__device__ u32 slab_delete(const SlabTable& t, u32 lane, u32 key, u32 value) {
    const u32 bucket = slab_bucket(t, key);
    u32 ptr = SLAB_NULL;
    while (true) {
        u32* slab = slab_at(t, bucket, ptr);
        const u32 word = slab_word(slab, lane);
        const u32 partner = __shfl_down_sync(0xFFFFFFFFu, word, 1);
        const u32 found = __ballot_sync(0xFFFFFFFFu, word == key && partner == value) & SLAB_KEY_LANES;
        if (found != 0) {
            const u32 leader = __ffs(found) - 1;
            u32 done = 0;
            if (lane == leader) {
                const u64 pair = (u64)value << 32 | key;
                const u64 gone = (u64)SLAB_DELETED << 32 | key;
                done = atomicCAS((u64*)(slab + lane), pair, gone) == pair;
            }
            if (__shfl_sync(0xFFFFFFFFu, done, leader)) return 1;
            continue;  // another warp deleted that pair first: look again
        }
        const u32 next = __shfl_sync(0xFFFFFFFFu, word, SLAB_NEXT_WORD);
        if (next == SLAB_NULL) return 0;
        ptr = next;
    }
}

// The number of live values of `key`.
__device__ u32 slab_search(const SlabTable& t, u32 lane, u32 key) {
    const u32 bucket = slab_bucket(t, key);
    u32 ptr = SLAB_NULL;
    u32 count = 0;
    while (true) {
        const u32* slab = slab_at(t, bucket, ptr);
        const u32 word = slab_word(slab, lane);
        const u32 partner = __shfl_down_sync(0xFFFFFFFFu, word, 1);
        count += __popc(__ballot_sync(0xFFFFFFFFu, word == key && partner < SLAB_DELETED) & SLAB_KEY_LANES);
        const u32 next = __shfl_sync(0xFFFFFFFFu, word, SLAB_NEXT_WORD);
        if (next == SLAB_NULL) return count;
        ptr = next;
    }
}

// Runs operation i (ops[i] of SLAB_INSERT, SLAB_DELETE, SLAB_SEARCH on keys[i], values[i]) for
// every i < n and writes its result to results[i]: insert 1 if stored, delete 1 if a pair was
// deleted, search the key's live values. The work-sharing strategy of the paper: each lane holds
// one operation; the warp takes its lanes' operations in lane order, all 32 lanes working on each.
// Launched with whole warps; a warp of one launch does its operations in index order, so one warp
// alone does them exactly as the CPU twin does, one after another.
extern "C" __global__ void slab_apply(SlabTable t, const u32* ops, const u32* keys, const u32* values, u64 n,
                                      u32* results) {
    const u32 lane = threadIdx.x % 32;
    const u64 warp = (blockIdx.x * (u64)blockDim.x + threadIdx.x) / 32;
    const u64 warps = (gridDim.x * (u64)blockDim.x) / 32;
    u32 attempt = 0;
    u32 resident = slab_resident_block(t, (u32)warp, 0);
    for (u64 base = warp * 32; base < n; base += warps * 32) {
        const u64 i = base + lane;
        bool pending = i < n;
        while (true) {
            const u32 queue = __ballot_sync(0xFFFFFFFFu, pending);
            if (queue == 0) break;
            const u32 leader = __ffs(queue) - 1;
            const u64 j = base + leader;
            const u32 op = ops[j], key = keys[j], value = values[j];
            u32 result = 0;
            if (key == SLAB_EMPTY || (op != SLAB_SEARCH && value >= SLAB_DELETED)) {
                if (lane == 0) atomicOr(t.status, STATUS_SLAB_BAD_PAIR);
            } else if (op == SLAB_INSERT) {
                result = slab_insert(t, (u32)warp, lane, key, value, resident, attempt);
                if (result == 0 && lane == 0) atomicOr(t.status, STATUS_SLAB_POOL_EXHAUSTED);
            } else if (op == SLAB_DELETE) {
                result = slab_delete(t, lane, key, value);
            } else if (op == SLAB_SEARCH) {
                result = slab_search(t, lane, key);
            } else if (lane == 0) {
                atomicOr(t.status, STATUS_SLAB_BAD_OP);
            }
            if (lane == leader) {
                results[j] = result;
                pending = false;
            }
        }
    }
}
