#pragma once
// The hot pixel loops are compiled for AVX2 as well, chosen at load time by an ifunc resolver.
// Under ThreadSanitizer GCC instruments that resolver, and the dynamic loader runs it before the
// sanitizer's runtime exists: the program crashes before main. Those builds keep the default code,
// as do builds for other architectures (aarch64 hosts such as Grace Hopper have no "avx2" target).
#if defined(__SANITIZE_THREAD__) || !defined(__x86_64__)
#define TB_CLONES_AVX2
#else
#define TB_CLONES_AVX2 __attribute__((target_clones("avx2", "default")))
#endif
