// The malloc-counting shim of `roost-alloc-count` (decision 0070): see
// include/CAllocationCounter.h. glibc supports replacing malloc by defining
// these functions in the executable (glibc manual, "Replacing malloc"): the
// dynamic linker binds every shared object's malloc (libswiftCore's
// swift_slowAlloc, libc's own strdup, ...) to these definitions. Each one
// forwards to glibc's allocator through its exported `__libc_*` entry points,
// so no dlsym bootstrap is needed, and counts with relaxed atomics: the
// counts are read only after the measured requests have been answered.

#define _GNU_SOURCE
#include "CAllocationCounter.h"

#include <errno.h>
#include <execinfo.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

extern void *__libc_malloc(size_t size);
extern void *__libc_calloc(size_t count, size_t size);
extern void *__libc_realloc(void *pointer, size_t size);
extern void __libc_free(void *pointer);
extern void *__libc_memalign(size_t alignment, size_t size);
extern void *__libc_valloc(size_t size);
extern void *__libc_pvalloc(size_t size);

#define THREAD_LOCAL __thread __attribute__((tls_model("initial-exec")))

static atomic_int counting;
static atomic_uint_fast64_t allocation_count;
static atomic_uint_fast64_t reallocation_count;
static atomic_uint_fast64_t free_count;
static atomic_uint_fast64_t byte_count;

/// The measuring client's thread.
static THREAD_LOCAL int thread_excluded;
/// Inside the backtrace recorder: backtrace() itself may allocate.
static THREAD_LOCAL int thread_in_recorder;
/// roost_alloc_counter_check_interposed's own probe.
static THREAD_LOCAL int thread_probing;
static THREAD_LOCAL int thread_probe_count;

// MARK: backtraces (debug mode)

enum { frames_max = 32, stacks_max = 16384 };

/// One distinct call stack. `key` 0: free slot; `ready` once frames are written.
typedef struct {
    atomic_uint_fast64_t key;
    atomic_uint_fast64_t count;
    atomic_int ready;
    int depth;
    void *frames[frames_max];
} stack_entry;

static stack_entry stacks[stacks_max];
static atomic_int backtrace_depth;
static atomic_int stacks_overflowed;

static uint64_t stack_key(void *const *frames, int depth) {
    uint64_t hash = 1469598103934665603ull;
    for (int index = 0; index < depth; index++) {
        hash ^= (uint64_t)(uintptr_t)frames[index];
        hash *= 1099511628211ull;
    }
    return hash == 0 ? 1 : hash;
}

static void record_stack(void) {
    int depth = atomic_load_explicit(&backtrace_depth, memory_order_relaxed);
    if (depth == 0 || thread_in_recorder) return;
    thread_in_recorder = 1;
    void *frames[frames_max + 2];
    // Two more frames than asked: this function and the hook that called it are dropped.
    int taken = backtrace(frames, depth + 2);
    int kept = taken > 2 ? taken - 2 : 0;
    uint64_t key = stack_key(frames + 2, kept);
    for (uint64_t probe = 0; probe < stacks_max; probe++) {
        stack_entry *entry = &stacks[(key + probe) % stacks_max];
        uint_fast64_t seen = atomic_load_explicit(&entry->key, memory_order_acquire);
        if (seen == 0) {
            uint_fast64_t expected = 0;
            if (atomic_compare_exchange_strong(&entry->key, &expected, key)) {
                entry->depth = kept;
                memcpy(entry->frames, frames + 2, sizeof(void *) * (size_t)kept);
                atomic_store_explicit(&entry->ready, 1, memory_order_release);
                atomic_fetch_add_explicit(&entry->count, 1, memory_order_relaxed);
                thread_in_recorder = 0;
                return;
            }
            seen = expected;
        }
        if (seen == key) {
            atomic_fetch_add_explicit(&entry->count, 1, memory_order_relaxed);
            thread_in_recorder = 0;
            return;
        }
    }
    atomic_store_explicit(&stacks_overflowed, 1, memory_order_relaxed);
    thread_in_recorder = 0;
}

// MARK: counting

static inline int counts_here(void) {
    return atomic_load_explicit(&counting, memory_order_relaxed) && !thread_excluded;
}

static inline void count_allocation(size_t size) {
    if (thread_probing) thread_probe_count++;
    if (thread_in_recorder || !counts_here()) return;
    atomic_fetch_add_explicit(&allocation_count, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&byte_count, size, memory_order_relaxed);
    record_stack();
}

static inline void count_free(void) {
    if (!counts_here()) return;
    atomic_fetch_add_explicit(&free_count, 1, memory_order_relaxed);
}

void *malloc(size_t size) {
    count_allocation(size);
    return __libc_malloc(size);
}

void *calloc(size_t count, size_t size) {
    size_t total;
    count_allocation(__builtin_mul_overflow(count, size, &total) ? SIZE_MAX : total);
    return __libc_calloc(count, size);
}

void *realloc(void *pointer, size_t size) {
    if (pointer == NULL) {
        count_allocation(size);
    } else if (size == 0) {
        count_free();
    } else if (counts_here()) {
        atomic_fetch_add_explicit(&reallocation_count, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&byte_count, size, memory_order_relaxed);
        record_stack();
    }
    return __libc_realloc(pointer, size);
}

void free(void *pointer) {
    if (pointer != NULL) count_free();
    __libc_free(pointer);
}

void *memalign(size_t alignment, size_t size) {
    count_allocation(size);
    return __libc_memalign(alignment, size);
}

void *aligned_alloc(size_t alignment, size_t size) {
    count_allocation(size);
    return __libc_memalign(alignment, size);
}

int posix_memalign(void **result, size_t alignment, size_t size) {
    if (alignment == 0 || alignment % sizeof(void *) != 0 || (alignment & (alignment - 1)) != 0) return EINVAL;
    count_allocation(size);
    void *pointer = __libc_memalign(alignment, size);
    if (pointer == NULL) return ENOMEM;
    *result = pointer;
    return 0;
}

void *valloc(size_t size) {
    count_allocation(size);
    return __libc_valloc(size);
}

void *pvalloc(size_t size) {
    count_allocation(size);
    return __libc_pvalloc(size);
}

// MARK: the API

static roost_alloc_counts current_counts(void) {
    roost_alloc_counts counts;
    counts.allocations = atomic_load_explicit(&allocation_count, memory_order_relaxed);
    counts.reallocations = atomic_load_explicit(&reallocation_count, memory_order_relaxed);
    counts.frees = atomic_load_explicit(&free_count, memory_order_relaxed);
    counts.bytes = atomic_load_explicit(&byte_count, memory_order_relaxed);
    return counts;
}

void roost_alloc_counter_start(void) {
    atomic_store_explicit(&allocation_count, 0, memory_order_relaxed);
    atomic_store_explicit(&reallocation_count, 0, memory_order_relaxed);
    atomic_store_explicit(&free_count, 0, memory_order_relaxed);
    atomic_store_explicit(&byte_count, 0, memory_order_relaxed);
    atomic_store_explicit(&counting, 1, memory_order_seq_cst);
}

roost_alloc_counts roost_alloc_counter_stop(void) {
    atomic_store_explicit(&counting, 0, memory_order_seq_cst);
    return current_counts();
}

roost_alloc_counts roost_alloc_counter_read(void) { return current_counts(); }

void roost_alloc_counter_exclude_current_thread(int excluded) { thread_excluded = excluded != 0; }

int roost_alloc_counter_check_interposed(void) {
    thread_probing = 1;
    thread_probe_count = 0;
    // strdup lives in libc.so and calls malloc through the dynamic linker.
    // Called through a volatile pointer and kept in one: the optimizer may
    // otherwise remove an allocation it sees freed unused.
    char *(*volatile duplicate)(const char *) = strdup;
    static char *volatile copy;
    copy = duplicate("probe");
    thread_probing = 0;
    free(copy);
    copy = NULL;
    return thread_probe_count > 0;
}

void roost_alloc_counter_record_backtraces(int depth) {
    if (depth > frames_max) depth = frames_max;
    if (depth < 0) depth = 0;
    // The first backtrace() loads the unwinder (dlopen, which allocates): not while counting.
    void *warm[2];
    thread_in_recorder = 1;
    backtrace(warm, 2);
    thread_in_recorder = 0;
    atomic_store_explicit(&backtrace_depth, depth, memory_order_relaxed);
}

int roost_alloc_counter_write_backtraces(int fd, int top) {
    int distinct = 0;
    for (int index = 0; index < stacks_max; index++) {
        if (atomic_load_explicit(&stacks[index].ready, memory_order_acquire)) distinct++;
    }
    // Selection of the largest `top`, one pass each: the table is small and this runs once.
    static unsigned char written[stacks_max];
    memset(written, 0, sizeof(written));
    for (int rank = 0; rank < top; rank++) {
        int best = -1;
        uint64_t best_count = 0;
        for (int index = 0; index < stacks_max; index++) {
            if (written[index] || !atomic_load_explicit(&stacks[index].ready, memory_order_acquire)) continue;
            uint64_t count = atomic_load_explicit(&stacks[index].count, memory_order_relaxed);
            if (count > best_count) {
                best = index;
                best_count = count;
            }
        }
        if (best < 0) break;
        written[best] = 1;
        dprintf(fd, "stack %d: %llu allocations\n", rank + 1, (unsigned long long)best_count);
        backtrace_symbols_fd(stacks[best].frames, stacks[best].depth, fd);
        dprintf(fd, "\n");
    }
    return atomic_load_explicit(&stacks_overflowed, memory_order_relaxed) ? -1 : distinct;
}
