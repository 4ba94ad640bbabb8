// The one translation unit NVRTC compiles (src/gpu/kernels.rs): every kernel of kmerdb.
#include "build.cu"
#include "classify.cuh"
#include "hit_list.cuh"
#include "protein.cuh"
#include "slab_hash.cuh"
#include "update.cuh"
