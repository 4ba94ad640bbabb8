// Kraken's hit-list column on the GPU: each read's features' taxa (from `read_lookups`) as runs of
// `taxid:count`, formatted as text, the device twin of `output::kraken::write_hit_list` (with the
// runs of `hits::push_run`), byte for byte. The host then writes a line as the read's call, id and
// lengths around this text: formatting the runs was the largest part of its per-read work.
//
// Two launches: `hit_list_text` with `first` null sizes each read's text; a scan places them; the
// same kernel with `first` writes them.
#pragma once
#include "common.cuh"

// Must match HitListArgs in crates/kmerdb-gpu/src/gpu/classify.rs.
struct HitLists {
    const u32* taxa;           // per feature: its taxon node + 1, 0 when not in the index
    const u32* feature_count;  // per mate
    const u64* feature_first;  // per mate: where its features' taxa start
    const u64* read_mates;     // per read: its first mate (reads + 1 items)
    const u32* node_taxids;    // per taxonomy node: its taxid
    u64 reads;
};
static_assert(sizeof(HitLists) == 48, "struct HitLists must match HitListArgs in crates/kmerdb-gpu/src/gpu/classify.rs");

// Writes byte `c` at out[at] when out is not null; the next position.
__device__ __forceinline__ u64 put_byte(u8* out, u64 at, u8 c) {
    if (out) out[at] = c;
    return at + 1;
}

// Writes `v` in decimal at out[at..] when out is not null; the next position.
__device__ __forceinline__ u64 put_decimal(u8* out, u64 at, u64 v) {
    u8 digits[20];
    int n = 0;
    do {
        digits[n++] = (u8)('0' + v % 10);
        v /= 10;
    } while (v);
    for (int i = 0; i < n; ++i) at = put_byte(out, at, digits[n - 1 - i]);
    return at;
}

// One mate's runs, `taxid:count` separated by spaces (kraken.rs write_runs); *wrote: any run.
__device__ u64 put_mate_runs(const HitLists& h, u64 m, u8* out, u64 at, bool* wrote) {
    const u32* taxa = h.taxa + h.feature_first[m];
    const u32 n = h.feature_count[m];
    *wrote = false;
    u32 run_taxid = 0;
    u64 run_count = 0;
    for (u32 i = 0; i <= n; ++i) {
        const bool end = i == n;
        const u32 t = end ? 0 : (taxa[i] == 0 ? 0 : h.node_taxids[taxa[i] - 1]);
        if (!end && run_count > 0 && t == run_taxid) {
            ++run_count;
            continue;
        }
        if (run_count > 0) {
            if (*wrote) at = put_byte(out, at, ' ');
            *wrote = true;
            at = put_decimal(out, at, run_taxid);
            at = put_byte(out, at, ':');
            at = put_decimal(out, at, run_count);
        }
        run_taxid = t;
        run_count = 1;
    }
    return at;
}

// Per read r: its hit-list column (without the tab before it or the line's end). A pair's mates are
// separated by `|:|`, written even when a mate has no runs; a single read without runs gets `0:0`.
// With `first` null, lengths[r] = the text's length (lengths has reads + 1 items, the last left 0);
// else the text goes to text[first[r]..].
extern "C" __global__ void hit_list_text(HitLists h, const u64* first, u8* text, u64* lengths) {
    for (u64 r = blockIdx.x * (u64)blockDim.x + threadIdx.x; r < h.reads; r += (u64)gridDim.x * blockDim.x) {
        u8* out = first ? text + first[r] : nullptr;
        const u64 m = h.read_mates[r];
        const bool paired = h.read_mates[r + 1] - m == 2;
        bool wrote;
        u64 at = put_mate_runs(h, m, out, 0, &wrote);
        if (paired) {
            if (wrote) at = put_byte(out, at, ' ');
            at = put_byte(out, at, '|');
            at = put_byte(out, at, ':');
            at = put_byte(out, at, '|');
            if (h.feature_count[m + 1] > 0) {
                at = put_byte(out, at, ' ');
                at = put_mate_runs(h, m + 1, out, at, &wrote);
            }
        } else if (!wrote) {
            at = put_byte(out, at, '0');
            at = put_byte(out, at, ':');
            at = put_byte(out, at, '0');
        }
        if (!first) lengths[r] = at;
    }
}
