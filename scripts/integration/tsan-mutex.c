// ThreadSanitizer's view of Synchronization.Mutex on Linux (preloaded by tsan-test.sh).
//
// On Linux `Mutex` is a futex word: its uncontended lock and unlock are atomic operations the
// compiler emits into the caller (and instruments there), but a contended lock or unlock calls
// `_MutexHandle._lockSlow` / `_unlockSlow` in libswiftSynchronization.so, which is not
// instrumented, and waits in the kernel. ThreadSanitizer then misses the happens-before edge a
// contended handoff makes and reports every access the mutex guards as a race. These two
// interposers call the real functions and tell ThreadSanitizer the edge: release on the mutex's
// word before a slow unlock, acquire on it after a slow lock — the same address the inlined
// atomics synchronise on. Nothing else is suppressed: a real race is still reported.
//
// Built by tsan-test.sh: clang -shared -fPIC -fdollars-in-identifiers tsan-mutex.c -o <so>
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>

// Weak: a process without ThreadSanitizer (swift-build, which the preload reaches too) has none.
void __tsan_acquire(void *addr) __attribute__((weak));
void __tsan_release(void *addr) __attribute__((weak));

// The functions' Swift calling convention: the handle's address is `self`, in the context register.
typedef __attribute__((swiftcall)) void (*lock_slow_fn)(uint32_t, void *__attribute__((swift_context)));
typedef __attribute__((swiftcall)) void (*unlock_slow_fn)(void *__attribute__((swift_context)));

#define LOCK_SLOW $s15Synchronization12_MutexHandleV9_lockSlowyys6UInt32VF
#define UNLOCK_SLOW $s15Synchronization12_MutexHandleV11_unlockSlowyyF
#define NAME(f) NAME_(f)
#define NAME_(f) #f

__attribute__((swiftcall)) void LOCK_SLOW(uint32_t selfId, void *__attribute__((swift_context)) handle) {
    static lock_slow_fn real;
    if (!real) real = (lock_slow_fn)dlsym(RTLD_NEXT, NAME(LOCK_SLOW));
    real(selfId, handle);
    if (__tsan_acquire) __tsan_acquire(handle);
}

__attribute__((swiftcall)) void UNLOCK_SLOW(void *__attribute__((swift_context)) handle) {
    static unlock_slow_fn real;
    if (!real) real = (unlock_slow_fn)dlsym(RTLD_NEXT, NAME(UNLOCK_SLOW));
    if (__tsan_release) __tsan_release(handle);
    real(handle);
}
