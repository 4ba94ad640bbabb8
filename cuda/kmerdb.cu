// The translation unit NVRTC compiles for kmerdb (crates/kmerdb-gpu/src/gpu/kernels.rs): every kernel its commands
// run. The slab hash table (slab_hash.cuh) and the benchmark's limits (limits.cuh) are units of
// their own, compiled only where they are used.
#include "build.cu"
#include "classify.cuh"
#include "hit_list.cuh"
#include "protein.cuh"
#include "update.cuh"
