// The GPU condense: from the bucket-list table to each shard's key index (BCHT) and list stream,
// the same bytes as the CPU's ShardAssembler (src/build/condense.rs, crates/kmerdb-core/src/index/bcht.rs), its twin.
// collect_keys and fill_lists also serve the table tests and the flush to host memory in rounds.
//
// The keys listed by collect_keys (in no particular order) are placed into the shards' BCHTs by the
// order-independent rounds of bcht::place_rounds: in round j, every key not yet placed proposes to
// its j-th candidate bucket, and each bucket takes the smallest proposers it has room for. The
// host places the few keys left over (bcht::place_stragglers), then the lists are written in slot
// order into each shard's bit stream.
#pragma once
#include "common.cuh"
#include "bucket_list.cuh"

// Renumbering of targets at condense time: remap[provisional] = final id, or NO_FEATURE to drop
// the target's values. With remap_len == 0 values are kept as they are (table tests).
struct Remap {
    const u32* remap;
    u32 remap_len;
    u32 window_bits;
};

__device__ __forceinline__ bool remap_value(const Remap& m, u64 v, u64* out) {
    if (m.remap_len == 0) {
        *out = v;
        return true;
    }
    const u32 target = (u32)(v >> 32);
    if (target >= m.remap_len || m.remap[target] == NO_FEATURE) return false;
    *out = ((u64)m.remap[target] << m.window_bits) | (u32)v;
    return true;
}

// Counts occupied key slots.
extern "C" __global__ void count_keys(Table t, u64 capacity, u64* occupied) {
    u64 mine = 0;
    for (u64 s = blockIdx.x * (u64)blockDim.x + threadIdx.x; s < capacity; s += (u64)gridDim.x * blockDim.x)
        mine += t.keys[s] != NO_FEATURE;
    if (mine) atomicAdd(occupied, mine);
}

// Lists every key with at least one kept value: (key, slot, kept values), in no particular order.
extern "C" __global__ void collect_keys(Table t, u64 capacity, Remap m, u32* keys, u32* slots, u32* counts,
                                        u64* n) {
    for (u64 s = blockIdx.x * (u64)blockDim.x + threadIdx.x; s < capacity; s += (u64)gridDim.x * blockDim.x) {
        const u32 key = t.keys[s];
        if (key == NO_FEATURE) continue;
        u32 kept = 0;
        u64 out;
        for_each_value(t, (u32)s, [&](u64 v) { kept += remap_value(m, v, &out); });
        if (kept == 0) continue;
        const u64 i = atomicAdd(n, 1ull);
        keys[i] = key;
        slots[i] = (u32)s;
        counts[i] = kept;
    }
}

// Writes the kept values of slots[i] at out[offsets[i]..], renumbered and packed; sorted ascending
// when `sort` is set (the build fills only lists within the location cap, so these are short).
extern "C" __global__ void fill_lists(Table t, Remap m, const u32* slots, const u64* offsets, u64 n, u32 sort,
                                      u64* out) {
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        u64* list = out + offsets[i];
        u64 len = 0;
        for_each_value(t, slots[i], [&](u64 v) {
            u64 packed;
            if (!remap_value(m, v, &packed)) return;
            u64 j = len++;
            while (sort && j > 0 && list[j - 1] > packed) {
                list[j] = list[j - 1];
                --j;
            }
            list[j] = packed;
        });
    }
}

// Lists the keys over the location cap (clade features) as (key, slot, kept values, key index), in
// no particular order (the host sorts them, names each one's clade and keeps its whole list for the
// index's clade lists section).
extern "C" __global__ void list_clades(const u32* keys, const u32* slots, const u32* counts, u64 n, u32 cap,
                                       u32* out_keys, u32* out_slots, u32* out_counts, u32* out_index, u64* found) {
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        if (counts[i] <= cap) continue;
        const u64 j = atomicAdd(found, 1ull);
        out_keys[j] = keys[i];
        out_slots[j] = slots[i];
        out_counts[j] = counts[i];
        out_index[j] = (u32)i;
    }
}

// clade[index[x]] = nodes[x] + 1: each clade feature's clade, 0 for the keys with lists.
extern "C" __global__ void set_clades(const u32* index, const u32* nodes, u64 m, u32* clade) {
    for (u64 x = blockIdx.x * (u64)blockDim.x + threadIdx.x; x < m; x += (u64)gridDim.x * blockDim.x)
        clade[index[x]] = nodes[x] + 1;
}

#define BUCKET_SLOTS 16
#define EMPTY_SLOT 0x00000000FFFFFFFFull  // key NO_FEATURE, value 0: crates/kmerdb-core/src/index/bcht.rs EMPTY_SLOT
#define INLINE_FLAG 0x80000000u
#define PAD_WORDS 2  // crates/kmerdb-core/src/index/locations.rs PAD_WORDS

// Must match crates/kmerdb-core/src/index/bcht.rs: BUCKET_SEEDS and MIX.
__device__ __constant__ u32 BUCKET_SEEDS[3] = {0x9e3779b9u, 0x85ebca6bu, 0xc2b2ae35u};
#define MIX0 0x85ebca6bu
#define MIX1 0xc2b2ae35u

// The j-th hash of `key`: a permutation of its shard's local keys, the bits above its shard bits
// (crates/kmerdb-core/src/index/bcht.rs KeyHash::permute).
__device__ __forceinline__ u32 permute(u32 key, int j, u32 shard_bits) {
    const u32 d = 32 - shard_bits, mask = 0xFFFFFFFFu >> shard_bits;
    const u32 s1 = (d + 1) / 2, s2 = (d + 2) / 3;  // div_ceil(2), div_ceil(3)
    u32 h = ((key >> shard_bits) ^ BUCKET_SEEDS[j]) & mask;
    h ^= h >> s1;
    h = (h * MIX0) & mask;
    h ^= h >> s2;
    h = (h * MIX1) & mask;
    return h ^ (h >> s1);
}

// The inverse of odd m modulo 2^32 (bcht.rs inverse).
__device__ __forceinline__ u32 inverse_odd(u32 m) {
    u32 x = m;
    for (int i = 0; i < 5; ++i) x *= 2u - m * x;
    return x;
}

// y ^ (y >> s) undone within d bits.
__device__ __forceinline__ u32 unshift(u32 y, u32 s, u32 d) {
    u32 x = y;
    for (u32 i = 0; i < (d + s - 1) / s; ++i) x = y ^ (x >> s);
    return x;
}

// The local key whose j-th hash is h (bcht.rs KeyHash::unpermute).
__device__ __forceinline__ u32 unpermute(u32 h, int j, u32 shard_bits) {
    const u32 d = 32 - shard_bits, mask = 0xFFFFFFFFu >> shard_bits;
    const u32 s1 = (d + 1) / 2, s2 = (d + 2) / 3;  // div_ceil(2), div_ceil(3)
    u32 x = unshift(h & mask, s1, d);
    x = (x * inverse_odd(MIX1)) & mask;
    x = unshift(x, s2, d);
    x = (x * inverse_odd(MIX0)) & mask;
    x = unshift(x, s1, d);
    return (x ^ BUCKET_SEEDS[j]) & mask;
}

// h modulo n (a shard's buckets): in 32 bits where n allows, a quarter of the instructions.
__device__ __forceinline__ u64 mod_buckets(u32 h, u64 n) {
    return n <= 0xFFFFFFFFull ? (u64)(h % (u32)n) : (u64)h % n;
}

// The shards' tables, one after the other: shard s has buckets [base[s], base[s] + buckets[s]).
struct Shards {
    const u64* base;
    const u64* buckets;
    u32 shard_bits;
};

__device__ __forceinline__ u32 shard_of(const Shards& sh, u32 key) {
    return shard_of_key(key, sh.shard_bits);
}

// Global bucket of the j-th candidate of `key` (crates/kmerdb-core/src/index/bcht.rs KeyHash::bucket, offset by the
// shard).
__device__ __forceinline__ u64 candidate(const Shards& sh, u32 key, int j) {
    const u32 s = shard_of(sh, key);
    return sh.base[s] + mod_buckets(permute(key, j, sh.shard_bits), sh.buckets[s]);
}

// Per shard, with the location cap: [keys, locations in lists, clade keys, clade keys' locations].
// Every key gets state 0 (to place): a key over the cap is placed as a clade feature.
extern "C" __global__ void shard_stats(const u32* keys, const u32* counts, u64 n, u32 cap, u32 shard_bits,
                                       u8* state, u64* stats) {
    __shared__ u64 local[64 * 4];
    const u32 shards = 1u << shard_bits;
    for (u32 i = threadIdx.x; i < shards * 4; i += blockDim.x) local[i] = 0;
    __syncthreads();
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        const u32 s = shard_of_key(keys[i], shard_bits);
        const bool listed = counts[i] <= cap;
        state[i] = 0;
        atomicAdd(&local[s * 4], 1ull);
        if (!listed) atomicAdd(&local[s * 4 + 2], 1ull);
        atomicAdd(&local[s * 4 + (listed ? 1 : 3)], (u64)counts[i]);
    }
    __syncthreads();
    for (u32 i = threadIdx.x; i < shards * 4; i += blockDim.x)
        if (local[i]) atomicAdd(&stats[i], local[i]);
}

// Round j, step 1: each key still to place counts itself at its j-th candidate bucket.
extern "C" __global__ void propose_count(const u32* keys, const u8* state, u64 n, Shards sh, int j, u64* proposals) {
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
        if (state[i] == 0) atomicAdd(&proposals[candidate(sh, keys[i], j)], 1ull);
}

// Step 2 (after an exclusive scan of the counts into `first`): each key writes its index into its
// bucket's range of `proposers`, counting `proposals` back down to zero for the next round.
extern "C" __global__ void propose_scatter(const u32* keys, const u8* state, u64 n, Shards sh, int j,
                                           const u64* first, u64* proposals, u32* proposers) {
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        if (state[i] != 0) continue;
        const u64 b = candidate(sh, keys[i], j);
        const u64 at = atomicAdd(&proposals[b], ~0ull) - 1;  // a decrement
        proposers[first[b] + at] = (u32)i;
    }
}

// Step 3: each bucket sorts its proposers by key and takes the smallest it has room for, appending
// them after its earlier keys. Slots hold (key, index of the key in `keys`).
extern "C" __global__ void accept(const u32* keys, u8* state, u64 buckets, const u64* first, u32* proposers,
                                  u32* fill, u64* slots) {
    for (u64 b = blockIdx.x * (u64)blockDim.x + threadIdx.x; b < buckets; b += (u64)gridDim.x * blockDim.x) {
        u32* p = proposers + first[b];
        const u64 m = first[b + 1] - first[b];
        if (m == 0) continue;
        // Insertion sort: a bucket gets about 16 proposers in round 0 and few after.
        for (u64 x = 1; x < m; ++x) {
            const u32 v = p[x];
            const u32 kv = keys[v];
            u64 y = x;
            while (y > 0 && keys[p[y - 1]] > kv) {
                p[y] = p[y - 1];
                --y;
            }
            p[y] = v;
        }
        u32 f = fill[b];
        for (u64 x = 0; x < m && f < BUCKET_SLOTS; ++x, ++f) {
            slots[b * BUCKET_SLOTS + f] = (u64)keys[p[x]] | ((u64)p[x] << 32);
            state[p[x]] = 1;
        }
        fill[b] = f;
    }
}

// The keys left after the rounds, as slots (key, index), in no particular order.
extern "C" __global__ void collect_stragglers(const u32* keys, const u8* state, u64 n, u64* out, u64* found) {
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
        if (state[i] == 0) out[atomicAdd(found, 1ull)] = (u64)keys[i] | (i << 32);
}

// The order lists are written in: each shard's slots, then its leftover keys (`left`, sorted by
// key, the shard's first at left_first[shard]). Shard s starts at base[s] * 16 + left_first[s].
extern "C" __global__ void assemble_order(const u64* slots, u64 n_slots, const u64* left, u64 m, Shards sh,
                                          const u64* left_first, u64* order) {
    const u32 shards = 1u << sh.shard_bits;
    for (u64 g = blockIdx.x * (u64)blockDim.x + threadIdx.x; g < n_slots + m; g += (u64)gridDim.x * blockDim.x) {
        if (g < n_slots) {
            const u64 b = g / BUCKET_SLOTS;
            u32 lo = 0, hi = shards;  // the shard whose buckets hold b: base[lo] <= b < base[lo + 1]
            while (hi - lo > 1) {
                const u32 mid = (lo + hi) / 2;
                if (sh.base[mid] <= b) lo = mid; else hi = mid;
            }
            order[g + left_first[lo]] = slots[g];
        } else {
            const u64 k = g - n_slots;
            const u32 s = shard_of(sh, (u32)left[k]);
            order[sh.base[s + 1] * BUCKET_SLOTS + k] = left[k];
        }
    }
}

// Scratch room each slot's list needs to be sorted in: its locations, none for an empty slot, a
// clade feature or an inline single location.
extern "C" __global__ void slot_room(const u64* slots, u64 n_slots, const u32* counts, const u32* clade,
                                     u32 inline_single, u64* room) {
    for (u64 g = blockIdx.x * (u64)blockDim.x + threadIdx.x; g < n_slots; g += (u64)gridDim.x * blockDim.x) {
        const u64 s = slots[g];
        u64 r = 0;
        if ((u32)s != NO_FEATURE && !clade[s >> 32]) {
            const u32 c = counts[s >> 32];
            r = (c == 1 && inline_single) ? 0 : c;
        }
        room[g] = r;
    }
}

#define MAX_CODE 0xFFFFFFFFull  // crates/kmerdb-core/src/index/locations.rs MAX_CODE

// A step of JUMP targets or more: the code JUMP + 1, then the location in loc_bits (locations.rs JUMP).
#define JUMP 4ull
#define JUMP_CODE (JUMP + 1)

// The codes of location b after a (locations.rs delta_codes): a jump's second is b itself.
__device__ __forceinline__ void delta_codes(u64 a, u64 b, u32 wb, u64* x, u64* y) {
    const u64 mask = (1ull << wb) - 1;
    const u32 ta = (u32)(a >> wb), wa = (u32)(a & mask), tb = (u32)(b >> wb), wbb = (u32)(b & mask);
    const u64 dt = (u32)(tb - ta);
    if (dt >= JUMP) {
        *x = JUMP_CODE;
        *y = b;
        return;
    }
    *x = dt == 0 ? 2 : dt == 1 ? 1 : dt + 1;
    if (dt == 0) {
        *y = (u64)(u32)(wbb - wa - 1) + 1;
    } else {
        const long long d = (long long)wbb - (long long)wa;
        *y = (u64)((d << 1) ^ (d >> 63)) + 1;
    }
}

__device__ __forceinline__ u32 gamma_len(u64 x) { return 2 * (63 - __clzll((long long)x)) + 1; }

__device__ __forceinline__ u64 gamma_code(u64 x) {
    const u32 z = 63 - __clzll((long long)x);
    return (1ull << z) | ((x & ((1ull << z) - 1)) << (z + 1));
}

// The bits of a sorted list's delta codes, or ~0 when a code is too large (locations.rs delta_bits).
__device__ __forceinline__ u64 delta_bits(const u64* list, u64 len, u32 wb, u32 loc_bits) {
    u64 bits = 0;
    for (u64 x = 1; x < len; ++x) {
        u64 a, b;
        delta_codes(list[x - 1], list[x], wb, &a, &b);
        if (a != JUMP_CODE && b > MAX_CODE) return ~0ull;
        bits += gamma_len(a) + (a == JUMP_CODE ? loc_bits : gamma_len(b));
    }
    return bits;
}

// Whether a list of `len` locations whose codes take `bits` is delta-coded (locations.rs use_delta).
__device__ __forceinline__ bool use_delta(u64 bits, u64 len, u32 eb) {
    return bits != ~0ull && 2 * bits < (len - 1) * eb;
}

// A list's codes' bits that code_bits does not give (not a delta list, or 2^32 bits or more).
#define UNKNOWN_CODE_BITS 0xFFFFFFFFu

// Sorts each slot's kept values, renumbered and packed, into its scratch room, and counts the
// stream entries its list takes (ListWriter::add and add_clade): none for an empty slot or an inline
// single location, two for a clade feature (a zero head and its node), else the head, the first
// location and the rest, fixed or delta-coded, whichever is shorter. code_bits gets a delta list's
// codes' bits (stored_shard's Built::of, which otherwise walks the codes to find their end).
extern "C" __global__ void sort_lists(Table t, Remap m, const u32* table_slots, const u32* counts, const u32* clade,
                                      const u64* slots, u64 n_slots, const u64* room_start, u32 inline_single,
                                      u32 entry_bits, u32 window_bits, u32 loc_bits, u64* scratch, u64* entries,
                                      u32* code_bits) {
    for (u64 g = blockIdx.x * (u64)blockDim.x + threadIdx.x; g < n_slots; g += (u64)gridDim.x * blockDim.x) {
        const u64 s = slots[g];
        code_bits[g] = UNKNOWN_CODE_BITS;
        if ((u32)s == NO_FEATURE) {
            entries[g] = 0;
            continue;
        }
        if (clade[s >> 32]) {
            entries[g] = 2;
            continue;
        }
        if (counts[s >> 32] == 1 && inline_single) {
            entries[g] = 0;
            continue;
        }
        u64* list = scratch + room_start[g];
        u64 len = 0;
        for_each_value(t, table_slots[s >> 32], [&](u64 v) {
            u64 packed;
            if (!remap_value(m, v, &packed)) return;
            u64 j = len++;
            while (j > 0 && list[j - 1] > packed) {
                list[j] = list[j - 1];
                --j;
            }
            list[j] = packed;
        });
        const u64 bits = delta_bits(list, len, window_bits, loc_bits);
        // Delta: a flag bit, the length's gamma code, the first location and the codes, to whole
        // entries; fixed: a head entry and an entry each.
        const bool delta = use_delta(bits, len, entry_bits);
        entries[g] = delta ? (1 + gamma_len(len) + entry_bits + bits + entry_bits - 1) / entry_bits : 1 + len;
        if (delta && bits < UNKNOWN_CODE_BITS) code_bits[g] = (u32)bits;
    }
}

// Where each shard's stream starts: the global entry index of its first slot, and its first word.
struct Streams {
    const u64* first_entry;
    const u64* first_word;
    u32 entry_bits;
    u32 inline_single;
};

// ORs the low `bits` (at most 64) of v into a stream at bit `bit` (lists never overlap, so the
// order of the atomics does not matter).
__device__ __forceinline__ void put_bits(u32* words, u64 bit, u64 v, u32 bits) {
    while (bits > 0) {
        const u32 shift = (u32)(bit & 31);
        const u32 take = min(32u - shift, bits);
        const u32 piece = (u32)(v & ((take == 32) ? 0xFFFFFFFFull : ((1ull << take) - 1)));
        if (piece) atomicOr(&words[bit >> 5], piece << shift);
        v = take == 64 ? 0 : v >> take;
        bit += take;
        bits -= take;
    }
}

// Writes each slot's list from its sorted scratch room into its shard's stream (ListWriter::add),
// and sets the slot's value: the inline location, or the list's first entry within the shard. A
// clade feature's list is a zero head and its node. Sets *overflow if an entry index needs 32 bits.
extern "C" __global__ void write_lists(Table t, Remap m, const u32* table_slots, const u32* counts, const u32* clade,
                                       u64* slots, u64 n_slots, const u64* room_start, const u64* entry_start,
                                       Shards sh, Streams st, u32 window_bits, u32 loc_bits, const u64* scratch, u32* words,
                                       u32* overflow) {
    for (u64 g = blockIdx.x * (u64)blockDim.x + threadIdx.x; g < n_slots; g += (u64)gridDim.x * blockDim.x) {
        const u64 s = slots[g];
        const u32 key = (u32)s;
        if (key == NO_FEATURE) continue;
        const u32 eb = st.entry_bits;
        const u32 shard = shard_of(sh, key);
        const u64 e = entry_start[g] - st.first_entry[shard];
        u32* w = words + st.first_word[shard];
        if (clade[s >> 32]) {
            if (e >= INLINE_FLAG) atomicOr(overflow, 1u);
            // The stream starts zeroed: the head, 0, needs no bits written.
            put_bits(w, (e + 1) * eb, clade[s >> 32] - 1, eb);
            slots[g] = (u64)key | ((u64)(u32)e << 32);
            continue;
        }
        if (counts[s >> 32] == 1 && st.inline_single) {
            u64 loc = 0;
            for_each_value(t, table_slots[s >> 32], [&](u64 v) {
                u64 packed;
                if (remap_value(m, v, &packed)) loc = packed;
            });
            slots[g] = (u64)key | ((u64)(INLINE_FLAG | (u32)loc) << 32);
            continue;
        }
        if (e >= INLINE_FLAG) atomicOr(overflow, 1u);
        const u64* list = scratch + room_start[g];
        const u64 len = counts[s >> 32];
        const u64 bits = delta_bits(list, len, window_bits, loc_bits);
        const bool delta = use_delta(bits, len, eb);
        u64 bit = e * eb;
        if (delta) {
            // The flag, the length's gamma code (locations.rs ListWriter::add).
            put_bits(w, bit, 1, 1);
            bit += 1;
            put_bits(w, bit, gamma_code(len), gamma_len(len));
            bit += gamma_len(len);
        } else {
            put_bits(w, bit, len << 1, eb);
            bit += eb;
        }
        put_bits(w, bit, list[0], eb);
        bit += eb;
        for (u64 x = 1; x < len; ++x) {
            if (!delta) {
                put_bits(w, bit, list[x], eb);
                bit += eb;
                continue;
            }
            u64 a, b;
            delta_codes(list[x - 1], list[x], window_bits, &a, &b);
            put_bits(w, bit, gamma_code(a), gamma_len(a));
            bit += gamma_len(a);
            if (a == JUMP_CODE) {
                put_bits(w, bit, b, loc_bits);
                bit += loc_bits;
                continue;
            }
            put_bits(w, bit, gamma_code(b), gamma_len(b));
            bit += gamma_len(b);
        }
        slots[g] = (u64)key | ((u64)(u32)e << 32);
    }
}

// Exclusive scan, one tile of SCAN_TILE items per block of SCAN_THREADS threads: out[i] = sum of
// in[0..i) within the tile; the tile's total goes to sums[block]. scan_add then adds the scanned
// tile totals.
#define SCAN_THREADS 256
#define SCAN_ITEMS 8
#define SCAN_TILE (SCAN_THREADS * SCAN_ITEMS)

extern "C" __global__ void scan_tiles(const u64* in, u64 n, u64* out, u64* sums) {
    __shared__ u64 warp_sums[SCAN_THREADS / 32];
    const u64 first = blockIdx.x * (u64)SCAN_TILE + threadIdx.x * (u64)SCAN_ITEMS;
    u64 items[SCAN_ITEMS];
    u64 mine = 0;
    for (int x = 0; x < SCAN_ITEMS; ++x) {
        items[x] = first + x < n ? in[first + x] : 0;
        mine += items[x];
    }
    // Inclusive scan of the threads' sums: within warps by shuffles, then across the warps.
    const u32 lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    u64 inc = mine;
    for (int d = 1; d < 32; d <<= 1) {
        const u64 o = __shfl_up_sync(0xFFFFFFFFu, inc, d);
        if (lane >= (u32)d) inc += o;
    }
    if (lane == 31) warp_sums[warp] = inc;
    __syncthreads();
    if (warp == 0) {
        u64 w = lane < SCAN_THREADS / 32 ? warp_sums[lane] : 0;
        for (int d = 1; d < 32; d <<= 1) {
            const u64 o = __shfl_up_sync(0xFFFFFFFFu, w, d);
            if (lane >= (u32)d) w += o;
        }
        if (lane < SCAN_THREADS / 32) warp_sums[lane] = w;
    }
    __syncthreads();
    u64 run = inc - mine + (warp > 0 ? warp_sums[warp - 1] : 0);
    for (int x = 0; x < SCAN_ITEMS; ++x) {
        if (first + x < n) out[first + x] = run;
        run += items[x];
    }
    if (threadIdx.x == SCAN_THREADS - 1) sums[blockIdx.x] = run;
}

extern "C" __global__ void scan_add(u64* out, u64 n, const u64* tile_offsets) {
    const u64 i = blockIdx.x * (u64)SCAN_TILE;
    const u64 add = tile_offsets[blockIdx.x];
    if (add == 0) return;
    for (u64 x = threadIdx.x; x < SCAN_TILE && i + x < n; x += SCAN_THREADS) out[i + x] += add;
}

// out[x] = src[at[x]] for a few indexes (the shard boundaries of a scan).
extern "C" __global__ void gather_u64(const u64* src, const u64* at, u64 n, u64* out) {
    for (u64 x = blockIdx.x * (u64)blockDim.x + threadIdx.x; x < n; x += (u64)gridDim.x * blockDim.x) out[x] = src[at[x]];
}

extern "C" __global__ void fill_u64(u64* p, u64 n, u64 v) {
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) p[i] = v;
}

// The host builds these arguments as Rust structs, which assert the same sizes.
static_assert(sizeof(Shards) == 24, "struct Shards must match ShardsArgs in crates/kmerdb-gpu/src/gpu/condense.rs");
static_assert(sizeof(Streams) == 24, "struct Streams must match StreamsArgs in crates/kmerdb-gpu/src/gpu/condense.rs");
static_assert(sizeof(Remap) == 16, "struct Remap must match RemapArgs in crates/kmerdb-gpu/src/gpu/table.rs");
