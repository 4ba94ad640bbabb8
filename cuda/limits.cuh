// Micro-benchmarks of the hardware limits table rates are quoted against (REFERENCE.md section 6):
// random 8-byte atomicCAS and random 128-byte bucket reads by 16 threads, on arrays far above L2.
#pragma once
#include "common.cuh"

__device__ __forceinline__ u64 xorshift64(u64 x) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
}

extern "C" __global__ void limit_cas(u64* a, u64 n, u32 iters, u64 seed) {
    u64 x = seed ^ ((blockIdx.x * (u64)blockDim.x + threadIdx.x) * 0x9e3779b97f4a7c15ull);
    for (u32 i = 0; i < iters; ++i) {
        x = xorshift64(x);
        atomicCAS(&a[x % n], x, x + 1);
    }
}

// Each group of 16 threads reads one random 128-byte line (8 bytes a thread) per iteration.
extern "C" __global__ void limit_bucket_reads(const u64* a, u64 lines, u32 iters, u64 seed, u64* sink) {
    const u64 group = (blockIdx.x * (u64)blockDim.x + threadIdx.x) / 16;
    const u32 lane = threadIdx.x & 15u;
    u64 x = seed ^ (group * 0x9e3779b97f4a7c15ull);
    u64 acc = 0;
    for (u32 i = 0; i < iters; ++i) {
        x = xorshift64(x);
        acc ^= a[(x % lines) * 16 + lane];
    }
    if (acc == 0x123456789abcdefull) *sink = acc;
}
