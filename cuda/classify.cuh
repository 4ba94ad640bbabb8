// `kmerdb classify` on the GPU: the device twin of src/classify/candidates.rs, bit for bit.
//
// Per batch of reads: `read_lookups` sketches each mate (Sketcher::read_features) and looks its
// features up in the index's key index (PackedKeys::lookup), a scan places every feature's
// locations, `gather_locations` decodes the lists (LocationList::at), and `read_candidates` sorts each
// read's locations and picks its top candidates (top_candidates). The host takes the decision (an
// LCA over two candidates is cheaper there than a transfer).
#pragma once
#include "common.cuh"
#include "sketch.cuh"
#include "condense.cuh"

// The index in device memory, shard by shard: each shard's packed key index and stream may be on
// this GPU or, with several GPUs, on another one, read through peer access.
struct DeviceIndex {
    const u64* slot_base;    // per shard: address of its key index (its block's first word)
    const u64* word_base;    // per shard: address of its stream's first word
    const u64* buckets;
    const u64* shard_words;
    const u64* key_code;     // per shard: tag bits | code bits << 8 | fixed codes << 16 | unit bits << 24 | base bits << 32
    const u64* base_line;    // per shard: the slope and the bias of its bases' line (packed_keys.rs BaseLine)
    const u64* window_starts;  // GlobalWindows (locations.rs): each target's first global window, then the total
    const u32* window_dir;     // the target holding window i << dir_shift
    u32 shard_bits;
    u32 entry_bits;  // a stored stream's
    u32 window_bits;
    u32 targets;
    u32 dir_shift;
    u32 nodes;  // taxonomy tree nodes: a clade feature's node must be below
    u32 loc_bits;  // target bits + window bits: a delta list's jump (locations.rs JUMP)
    u32 unused;
};

#define NOT_FOUND 0xFFFFFFFFFFFFFFFFull

// GlobalWindows::location: the location (target << window_bits | window) of a stored entry, a global
// window number; NOT_FOUND (the CPU's UNREADABLE) past the last window.
__device__ __forceinline__ u64 stored_location(const DeviceIndex& ix, u64 g) {
    if (g >= ix.window_starts[ix.targets]) return NOT_FOUND;
    u64 t = ix.window_dir[g >> ix.dir_shift];
    while (ix.window_starts[t + 1] <= g) ++t;
    return (t << ix.window_bits) | (g - ix.window_starts[t]);
}

// The `bits` (at most 34) of a key index at bit `bit`; two words past it are readable (the
// stream's padding follows the key index): crates/kmerdb-core/src/index/packed_keys.rs field.
__device__ __forceinline__ u64 key_field(const u32* words, u64 bit, u32 bits) {
    const u64 w = bit >> 5;
    const u32 shift = (u32)(bit & 31);
    u64 v = ((u64)words[w] | ((u64)words[w + 1] << 32)) >> shift;
    if (shift + bits > 64) v |= (u64)words[w + 2] << (64 - shift);
    return v & ((1ull << bits) - 1);
}

// Where a feature's list is, as a lookup hands it on (locations.rs ListRef): start << 8 | kind,
// `start` a bit of the shard's stream; kind 1..MAX_FIXED a fixed list of that length, 0 a list
// that says what it is, ESCAPED + k the bucket's k-th escaped list, after the others from `start`.
#define LIST_MAX_FIXED 239ull
#define LIST_ESCAPED 240ull
#define LIST_MAX_ESCAPED 16ull

// One shard's key index (packed_keys.rs KeyCode, SlotCodes and PackedKeys).
struct ShardKeys {
    const u32* words;
    u64 buckets;
    u64 bucket_bits;  // a bucket's bits (bucket b starts at bit b * bucket_bits)
    u64 slope, bias;  // the bases' line (packed_keys.rs BaseLine)
    u32 tb, cb, fixed, base_bits;
    u32 entry_bits, unit_bits;  // a fixed list's locations; a described list's size unit (SlotCodes)
};

__device__ __forceinline__ ShardKeys shard_keys(const DeviceIndex& ix, u32 sh) {
    const u64 code = ix.key_code[sh];
    const u32 tb = (u32)(code & 0xff), cb = (u32)((code >> 8) & 0xff), fixed = (u32)((code >> 16) & 0xff);
    const u32 unit = (u32)((code >> 24) & 0xff), base_bits = (u32)(code >> 32);
    const u64 bits = (u64)base_bits + 16 * (u64)(tb + cb);
    return {(const u32*)ix.slot_base[sh], ix.buckets[sh], bits, ix.base_line[2 * sh], ix.base_line[2 * sh + 1],
            tb, cb, fixed, base_bits, ix.entry_bits, unit};
}

// Slot s of bucket b: its tag (0 for an empty slot) and its code, which follows the tag.
__device__ __forceinline__ u64 slot_tag(const ShardKeys& k, u64 b, u32 s) {
    return key_field(k.words, b * k.bucket_bits + k.base_bits + (u64)s * (k.tb + k.cb), k.tb);
}

__device__ __forceinline__ u64 slot_code(const ShardKeys& k, u64 b, u32 s) {
    return key_field(k.words, b * k.bucket_bits + k.base_bits + (u64)s * (k.tb + k.cb) + k.tb, k.cb);
}

// BaseLine::base: the line at b, (b * slope) >> 32, plus the bucket's field, less the bias.
__device__ __forceinline__ u64 bucket_base(const ShardKeys& k, u64 b) {
    const u64 line = (__umul64hi(b, k.slope) << 32) | ((b * k.slope) >> 32);
    return line + key_field(k.words, b * k.bucket_bits, k.base_bits) - k.bias;
}

__device__ __forceinline__ u64 code_escape(const ShardKeys& k) { return (1ull << k.cb) - 1; }

// Bits in its bucket's run of a slot with code c (SlotCodes::size).
__device__ __forceinline__ u64 code_size(const ShardKeys& k, u64 c) {
    if (c < k.fixed) return (c + 1) * k.entry_bits;
    if (c < code_escape(k)) return (c - k.fixed + 1) * k.unit_bits;
    return 0;
}

// The list of slot s of bucket b, whose code is c (PackedKeys::probe and slots).
__device__ __forceinline__ u64 slot_list(const ShardKeys& k, u64 b, u32 s, u64 c) {
    const u64 base = bucket_base(k, b);
    u64 before = 0, escaped = 0;
    for (u32 i = 0; i < s; ++i) {
        const u64 ci = slot_code(k, b, i);
        before += code_size(k, ci);
        escaped += ci == code_escape(k);
    }
    if (c != code_escape(k)) return ((base + before) << 8) | (c < k.fixed ? c + 1 : 0);
    // Escaped lists follow the whole run: the sizes of the slots after this one too.
    for (u32 i = s + 1; i < BUCKET_SLOTS && slot_tag(k, b, i) != 0; ++i) before += code_size(k, slot_code(k, b, i));
    return ((base + before) << 8) | (LIST_ESCAPED + escaped);
}

// Where `key`'s list is (PackedKeys::lookup): candidate buckets in order, stopping at the key's
// tag or at the first empty slot. Sets *shard.
__device__ __forceinline__ bool index_lookup(const DeviceIndex& ix, u32 key, u32* shard, u64* list) {
    const u32 sh = shard_of_key(key, ix.shard_bits);
    *shard = sh;
    const ShardKeys k = shard_keys(ix, sh);
    if (k.buckets == 0) return false;
    for (int j = 0; j < 3; ++j) {
        const u32 h = permute(key, j, ix.shard_bits);
        const u64 b = mod_buckets(h, k.buckets);
        const u64 tag = (((u64)h / k.buckets) << 2) | (u64)(j + 1);
        for (u32 s = 0; s < BUCKET_SLOTS; ++s) {
            const u64 t = slot_tag(k, b, s);
            if (t == tag) {
                *list = slot_list(k, b, s, slot_code(k, b, s));
                return true;
            }
            if (t == 0) return false;
        }
    }
    return false;
}

// The eb-bit entry at bit `bit` of a stream (locations.rs `entry_at`).
__device__ __forceinline__ u64 read_entry(const u32* words, u32 eb, u64 bit) {
    const u64 w = bit >> 5;
    const u32 shift = (u32)(bit & 31);
    const u64 mask = eb == 64 ? ~0ull : ((1ull << eb) - 1);
    const u64 two = (u64)words[w] | ((u64)words[w + 1] << 32);
    if (eb + shift <= 64) return (two >> shift) & mask;
    return ((two >> shift) | ((u64)words[w + 2] << (64 - shift))) & mask;
}

// 64 bits of a stream from bit `bit` (at least 64 bits before the end of the padded words):
// crates/kmerdb-core/src/index/locations.rs bits_at.
__device__ __forceinline__ u64 bits_at(const u32* words, u64 bit) {
    const u64 w = bit >> 5;
    const u32 shift = (u32)(bit & 31);
    const u64 lo = (u64)words[w] | ((u64)words[w + 1] << 32);
    return shift == 0 ? lo : (lo >> shift) | ((u64)words[w + 2] << (64 - shift));
}

// One gamma code at *bit, if it is whole before `end` and below 2^32 (locations.rs read_gamma).
__device__ __forceinline__ bool read_gamma(const u32* words, u64* bit, u64 end, u64* x) {
    if (*bit >= end) return false;
    const u64 window = bits_at(words, *bit);
    if (window == 0) return false;
    const u64 z = (u64)(__ffsll((long long)window) - 1);
    if (z > 31 || *bit + 2 * z + 1 > end) return false;
    // A code is at most 63 bits: it is all in the window.
    *x = (1ull << z) | ((window >> (z + 1)) & ((1ull << z) - 1));
    *bit += 2 * z + 1;
    return true;
}

// A decoded list (LocationList::at): `len` entries from bit `first`, or (delta) `len`
// locations, `loc` then gamma codes from bit `first` to `end`; a clade feature's is empty, with
// its clade's node + 1 in `clade` (0 otherwise).
struct List {
    const u32* words;
    u64 first;
    u64 end;
    u64 loc;
    u32 len;
    u32 clade;
    bool delta;
};

// LocationList::decode_at of the list that says what it is from bit `at`, bounds checks included
// (a damaged index gives an empty list, and a clade node past the tree no clade).
__device__ __forceinline__ List decode_described(const DeviceIndex& ix, List l, u64 at, u64 real_bits) {
    const u64 eb = ix.entry_bits;
    // Every list is two entries or more (a delta list's flag, length and first location).
    if (at > real_bits || real_bits - at < 2 * eb) return l;
    const u64 head = read_entry(l.words, ix.entry_bits, at);
    if (head & 1) {
        // A delta list: the length's gamma code after the flag, then the first location; a length
        // longer than the stream could hold (two codes of a bit or more a location) is damage.
        u64 bit = at + 1, len;
        if (!read_gamma(l.words, &bit, real_bits, &len)) return l;
        if (bit + ix.entry_bits > real_bits || len > (real_bits - bit - ix.entry_bits) / 2 + 1) return l;
        const u64 mask = ix.entry_bits == 64 ? ~0ull : ((1ull << ix.entry_bits) - 1);
        l.delta = true;
        l.loc = stored_location(ix, bits_at(l.words, bit) & mask);
        l.first = bit + ix.entry_bits;
        l.end = real_bits;
        l.len = (u32)len;
        return l;
    }
    const u64 second = read_entry(l.words, ix.entry_bits, at + eb);
    const u64 len = (head >> 1) < 0xFFFFFFFFull ? (head >> 1) : 0xFFFFFFFFull;
    if (len == 0) {
        if (second < ix.nodes) l.clade = (u32)second + 1;
        return l;
    }
    if ((len + 1) * eb > real_bits - at) return l;
    l.first = at + eb;
    l.len = (u32)len;
    return l;
}

// LocationList::at: the list `list` (index_lookup's) of shard `shard`.
__device__ __forceinline__ List decode_list(const DeviceIndex& ix, u32 shard, u64 list) {
    List l = {(const u32*)ix.word_base[shard], 0, 0, 0, 0, 0, false};
    const u64 words = ix.shard_words[shard];
    const u64 real_bits = words >= PAD_WORDS ? (words - PAD_WORDS) * 32 : 0;
    const u64 eb = ix.entry_bits;
    u64 start = list >> 8;
    const u64 kind = list & 0xff;
    if (kind == 0) return decode_described(ix, l, start, real_bits);
    if (kind <= LIST_MAX_FIXED) {
        if (start > real_bits || kind * eb > real_bits - start) return l;
        l.first = start;
        l.len = (u32)kind;
        return l;
    }
    // Past the bucket's other escaped lists, each after its length in entries.
    const u64 skip = kind - LIST_ESCAPED < LIST_MAX_ESCAPED ? kind - LIST_ESCAPED : LIST_MAX_ESCAPED;
    for (u64 i = 0; i < skip; ++i) {
        if (start > real_bits || real_bits - start < eb) return l;
        const u64 size = read_entry(l.words, ix.entry_bits, start);
        if (size >= (real_bits - start) / eb) return l;  // the CPU saturates: past the end, empty
        start = start + eb + size * eb;
    }
    if (start > real_bits || real_bits - start < eb) return l;
    return decode_described(ix, l, start + eb, real_bits);
}

// Where a walk through a list is: the locations' iterator (locations.rs Locations).
struct Cursor {
    u64 bit;
    u32 i, t, w;
};

// The list's next location; those a damaged stream cannot give read as NOT_FOUND.
__device__ __forceinline__ u64 list_next(const DeviceIndex& ix, const List& l, Cursor& c) {
    const u32 i = c.i++;
    if (!l.delta) return stored_location(ix, read_entry(l.words, ix.entry_bits, l.first + (u64)i * ix.entry_bits));
    const u32 wb = ix.window_bits;
    const u64 mask = (1ull << wb) - 1;
    if (i == 0) {
        c.t = (u32)(l.loc >> wb);
        c.w = (u32)(l.loc & mask);
        c.bit = l.first;
        return l.loc;
    }
    u64 a, b;
    if (!read_gamma(l.words, &c.bit, l.end, &a)) {
        c.bit = l.end;  // the rest is unreadable too
        return 0xFFFFFFFFFFFFFFFFull;
    }
    if (a == JUMP_CODE) {
        // A jump: the location itself (locations.rs read_step).
        if (c.bit + ix.loc_bits > l.end) {
            c.bit = l.end;
            return 0xFFFFFFFFFFFFFFFFull;
        }
        const u64 loc = bits_at(l.words, c.bit) & (ix.loc_bits >= 64 ? ~0ull : ((1ull << ix.loc_bits) - 1));
        c.bit += ix.loc_bits;
        c.t = (u32)(loc >> wb);
        c.w = (u32)(loc & mask);
        return loc;
    }
    if (!read_gamma(l.words, &c.bit, l.end, &b)) {
        c.bit = l.end;
        return 0xFFFFFFFFFFFFFFFFull;
    }
    const u32 dt = a == 1 ? 1 : a == 2 ? 0 : (u32)(a - 1);
    if (dt == 0) {
        c.w = c.w + (u32)(b - 1) + 1;
    } else {
        const u64 z = b - 1;
        c.w = c.w + (u32)((long long)(z >> 1) ^ -(long long)(z & 1));
    }
    c.t += dt;
    return ((u64)c.t << wb) | ((u64)c.w & mask);
}

// The taxonomy for the hit lists: each target's tree node, and the tree's parents and depths.
struct DeviceTree {
    const u32* target_nodes;
    const u32* parents;
    const u32* depths;
    u32 targets;
    u32 enabled;
};

// TaxonTree::lca_index.
__device__ __forceinline__ u32 lca_node(const DeviceTree& t, u32 i, u32 j) {
    u32 di = t.depths[i], dj = t.depths[j];
    while (di > dj) { i = t.parents[i]; --di; }
    while (dj > di) { j = t.parents[j]; --dj; }
    while (i != j) { i = t.parents[i]; j = t.parents[j]; }
    return i;
}

// Mates of a batch: bytes back to back; mate m has bytes [offset[m], offset[m] + len[m]) and room
// for its features at [feature_first[m], feature_first[m + 1]).
struct Mates {
    const u8* seq;
    const u64* offset;
    const u32* len;
    const u64* feature_first;
    u64 count;
};

// Per mate: its features (Sketcher::read_features: a short mate is one window at the reference
// density, a long one is cut into windows), each feature's list (index_lookup's; its shard is its key's) or NOT_FOUND, its
// list length, and its clade (node + 1 for a clade feature, else 0). The hit lists' taxa come
// from gather_locations, a thread a feature: here a thread walked each of its mate's lists in
// turn for their LCA, and a warp waited on its longest (a quarter of the lanes busy, four times
// the lookups' time on a strain-rich index).
extern "C" __global__ void read_lookups(Mates mates, Sketching p, DeviceIndex ix, u32* features, u32* feature_count,
                                        u64* found, u64* lengths, u32* clades) {
    for (u64 m = blockIdx.x * (u64)blockDim.x + threadIdx.x; m < mates.count; m += (u64)gridDim.x * blockDim.x) {
        const u8* seq = mates.seq + mates.offset[m];
        const u64 len = mates.len[m];
        u32* out = features + mates.feature_first[m];
        const u64 per_window = p.window - p.k + 1;
        const u64 kmers = len + 1 > p.k ? len + 1 - p.k : 0;
        u32 n = 0;
        if (kmers > 2 * per_window) {
            const u64 windows = len < p.k ? 0 : (len - p.k) / p.stride + 1;
            for (u64 w = 0; w < windows; ++w) {
                const u64 start = w * p.stride;
                const u64 end = start + p.window < len ? start + p.window : len;
                n += sketch_window(seq, start, end, p.k, p.sketch_size, p.seed, out + n);
            }
        } else {
            u64 s = (p.sketch_size * kmers + per_window / 2) / per_window;
            if (s < 1) s = 1;
            n = sketch_window(seq, 0, len, p.k, (u32)s, p.seed, out);
        }
        feature_count[m] = n;
        const u64 f0 = mates.feature_first[m], f1 = mates.feature_first[m + 1];
        for (u64 f = f0; f < f1; ++f) {
            u64 hit = NOT_FOUND, length = 0;
            u32 clade = 0;
            u32 shard;
            u64 list;
            if (f - f0 < n && index_lookup(ix, features[f], &shard, &list)) {
                hit = list;
                const List l = decode_list(ix, shard, list);
                length = l.len;
                clade = l.clade;
            }
            found[f] = hit;
            lengths[f] = length;
            clades[f] = clade;
        }
    }
}

// Per feature slot: its list's locations at locations[first[f]..]; locations of targets the index
// does not have (a damaged index) become NOT_FOUND, which sorts last and is skipped. With the tree
// enabled, also the hit list's taxon: 1 + the LCA node of its targets (a clade feature's clade),
// or 0 (not found).
extern "C" __global__ void gather_locations(DeviceIndex ix, DeviceTree tree, const u32* features, const u64* found,
                                            const u64* first, u64 n, u64* locations, u32* taxa) {
    for (u64 f = blockIdx.x * (u64)blockDim.x + threadIdx.x; f < n; f += (u64)gridDim.x * blockDim.x) {
        const u64 hit = found[f];
        if (hit == NOT_FOUND) continue;
        const List l = decode_list(ix, shard_of_key(features[f], ix.shard_bits), hit);
        u64* out = locations + first[f];
        Cursor c = {0, 0, 0, 0};
        u32 node = NO_FEATURE;
        for (u32 i = 0; i < l.len; ++i) {
            const u64 loc = list_next(ix, l, c);
            const u64 target64 = loc >> ix.window_bits;
            out[i] = target64 < ix.targets ? loc : NOT_FOUND;
            if (tree.enabled && target64 < tree.targets) {
                const u32 t = tree.target_nodes[(u32)target64];
                node = node == NO_FEATURE ? t : (node == t ? t : lca_node(tree, node, t));
            }
        }
        if (tree.enabled) taxa[f] = l.clade ? l.clade : (node == NO_FEATURE ? 0 : node + 1);
    }
}

struct Candidate {
    u32 target, hits, first_window, last_window;
};

#define MAX_CLADES 4  // crates/kmerdb-gpu/src/gpu/classify.rs MAX_CLADES

// Per read (a thread each): its clade features counted per clade (count_clades in
// src/classify/candidates.rs), as (node, count) in node order at out[r * MAX_CLADES..], and how
// many clades in count[r]; a read with more than MAX_CLADES clades gets 0xFFFFFFFF and is left to
// the host. Read r's features are [read_feature[r], read_feature[r + 1]).
extern "C" __global__ void read_clades(const u32* clades, const u64* read_feature, u64 reads, uint2* out,
                                       u32* count) {
    for (u64 r = blockIdx.x * (u64)blockDim.x + threadIdx.x; r < reads; r += (u64)gridDim.x * blockDim.x) {
        uint2 mine[MAX_CLADES];
        u32 n = 0;
        bool over = false;
        for (u64 f = read_feature[r]; f < read_feature[r + 1] && !over; ++f) {
            const u32 c = clades[f];
            if (!c) continue;
            u32 at = 0;
            while (at < n && mine[at].x < c - 1) ++at;
            if (at < n && mine[at].x == c - 1) {
                ++mine[at].y;
            } else if (n == MAX_CLADES) {
                over = true;
            } else {
                for (u32 q = n; q > at; --q) mine[q] = mine[q - 1];
                mine[at] = make_uint2(c - 1, 1);
                ++n;
            }
        }
        for (u32 q = 0; q < n && !over; ++q) out[r * MAX_CLADES + q] = mine[q];
        count[r] = over ? 0xFFFFFFFFu : n;
    }
}

// Per read (one block each): sort its locations in shared memory and pick the top `max`
// candidates (candidates.rs top_candidates). A read whose locations exceed the shared capacity
// gets count 0xFFFFFFFF: the host classifies it (the same function, on the CPU). Locations are
// sorted as `T`: u32 where every location of the index fits below 0xFFFFFFFF (the sort is bound
// by shared memory's traffic, which that halves), else u64; NOT_FOUND becomes T's largest value,
// which sorts last as before.
template <typename T>
__device__ __forceinline__ void candidates_of_reads(const u64* locations, const u64* read_first, const u32* range,
                                                    u64 reads, u32 capacity, u32 window_bits, u32 max,
                                                    Candidate* out, u32* count) {
    // `capacity` locations (a power of two), then as many keys: a run's best range, kept at the
    // run's first location (crates/kmerdb-gpu/src/gpu/classify.rs SHARED_LOCATIONS).
    extern __shared__ u64 shared_words[];
    T* sorted = (T*)shared_words;
    u32* best = (u32*)(sorted + capacity);
    const T none = (T)NOT_FOUND;
    const u64 wmask = (1ull << window_bits) - 1;
    for (u64 r = blockIdx.x; r < reads; r += gridDim.x) {
        const u64 first = read_first[r];
        const u64 n = read_first[r + 1] - first;
        if (n > capacity) {
            if (threadIdx.x == 0) count[r] = 0xFFFFFFFFu;
            continue;  // uniform across the block
        }
        u32 size = 1;
        while (size < n) size <<= 1;
        for (u32 i = threadIdx.x; i < size; i += blockDim.x) {
            sorted[i] = i < n ? (T)locations[first + i] : none;
            best[i] = 0;
        }
        for (u32 k = 2; k <= size; k <<= 1) {
            for (u32 j = k / 2; j > 0; j >>= 1) {
                __syncthreads();
                for (u32 q = threadIdx.x; q < size / 2; q += blockDim.x) {
                    const u32 a = 2 * q - (q & (j - 1));
                    const u32 b = a + j;
                    const T x = sorted[a], y = sorted[b];
                    if ((x > y) == ((a & k) == 0)) {
                        sorted[a] = y;
                        sorted[b] = x;
                    }
                }
            }
        }
        __syncthreads();
        // Every location ends a window range of its target's run (the runs of one target each, in
        // target order): its run's start and the range's first location by binary search (targets
        // ascend; windows ascend within a run), and the run keeps its best range, most hits then
        // the earliest end, by an atomicMax at its first location. top_candidates
        // (src/classify/candidates.rs) walks each run instead: one thread took as long as the rest of
        // the classification on a strain-rich index, whose reads have hundreds of locations.
        const u32 span = range[r];
        for (u64 hi = threadIdx.x; hi < n; hi += blockDim.x) {
            const u64 v = sorted[hi];
            if (v == none) continue;
            const u64 target = v >> window_bits;
            u64 lo = 0, h = hi;
            while (lo < h) {
                const u64 mid = (lo + h) / 2;
                if (((u64)sorted[mid] >> window_bits) < target) lo = mid + 1; else h = mid;
            }
            const u64 start = lo;
            const u32 whi = (u32)(v & wmask);
            h = hi;
            while (lo < h) {
                const u64 mid = (lo + h) / 2;
                if (whi - (u32)(sorted[mid] & wmask) >= span) lo = mid + 1; else h = mid;
            }
            const u32 hits = (u32)(hi - lo + 1);
            atomicMax(&best[start], (hits << 16) | (0xFFFFu - (u32)(hi - start)));
        }
        __syncthreads();
        // The top list, by the first warp in `max` rounds: each round takes the best run left
        // (most hits, then the lowest target, which is the earliest run: top_candidates'
        // insertion order) by a warp's maximum over the run starts (every run start has a
        // non-zero best, at least one hit; every other location a zero one), and clears it. Lane
        // 0 inserting run by run into a list in global memory waited on a dependent load per list
        // place, and ranking every run against the others kept a lane or two of a warp busy: a
        // read of a strain-rich index hits hundreds of one-hit runs.
        if (threadIdx.x < 32) {
            const u32 lane = threadIdx.x;
            Candidate* top = out + r * max;
            u32 placed = 0;
            for (; placed < max; ++placed) {
                u32 pick = 0;
                for (u64 s = lane; s < n; s += 32) {
                    const u32 key = best[s];
                    if (key) pick = umax(pick, (key & 0xFFFF0000u) | (0xFFFFu - (u32)s));
                }
                for (u32 o = 16; o > 0; o >>= 1) pick = umax(pick, __shfl_xor_sync(0xFFFFFFFFu, pick, o));
                if (!pick) break;  // the same in every lane
                if (lane == 0) {
                    const u64 start = 0xFFFFu - (pick & 0xFFFFu);
                    const u32 key = best[start];
                    const u32 hits = key >> 16;
                    const u64 hi = start + (0xFFFFu - (key & 0xFFFFu));
                    top[placed] = {(u32)((u64)sorted[start] >> window_bits), hits, (u32)(sorted[hi + 1 - hits] & wmask),
                                   (u32)(sorted[hi] & wmask)};
                    best[start] = 0;
                }
                __syncwarp();
            }
            if (lane == 0) count[r] = placed;
        }
        __syncthreads();
    }
}

extern "C" __global__ void read_candidates(const u64* locations, const u64* read_first, const u32* range, u64 reads,
                                           u32 capacity, u32 window_bits, u32 max, Candidate* out, u32* count) {
    candidates_of_reads<u64>(locations, read_first, range, reads, capacity, window_bits, max, out, count);
}

extern "C" __global__ void read_candidates32(const u64* locations, const u64* read_first, const u32* range,
                                             u64 reads, u32 capacity, u32 window_bits, u32 max, Candidate* out,
                                             u32* count) {
    candidates_of_reads<u32>(locations, read_first, range, reads, capacity, window_bits, max, out, count);
}

// The host builds these arguments as Rust structs, which assert the same sizes.
static_assert(sizeof(DeviceIndex) == 96, "struct DeviceIndex must match IndexArgs in crates/kmerdb-gpu/src/gpu/classify.rs");
static_assert(sizeof(DeviceTree) == 32, "struct DeviceTree must match TreeArgs in crates/kmerdb-gpu/src/gpu/classify.rs");
static_assert(sizeof(Mates) == 40, "struct Mates must match MatesArgs in crates/kmerdb-gpu/src/gpu/classify.rs");
static_assert(sizeof(Candidate) == 16, "struct Candidate must match DeviceCandidate in crates/kmerdb-gpu/src/gpu/classify.rs");
