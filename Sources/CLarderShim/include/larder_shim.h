#ifndef LARDER_SHIM_H
#define LARDER_SHIM_H

#include <stdint.h>

/// Loads a 64-bit word another process may be rewriting (a shared file mapping), with acquire
/// ordering, so the compiler neither caches nor tears it.
static inline uint64_t larder_load_u64(const void *address) {
    return __atomic_load_n((const uint64_t *)address, __ATOMIC_ACQUIRE);
}

#endif
