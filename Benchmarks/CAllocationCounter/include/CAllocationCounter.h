#ifndef ROOST_CALLOCATIONCOUNTER_H
#define ROOST_CALLOCATIONCOUNTER_H

// A malloc-counting shim for `roost-alloc-count` only (decision 0070). This
// target defines malloc, calloc, realloc, free, posix_memalign,
// aligned_alloc, memalign, valloc and pvalloc for the whole process: every
// call goes on to glibc's own allocator (`__libc_malloc` and friends) and is
// counted with relaxed atomics, on every thread but the excluded ones. It
// must never be linked into `roost` or a test binary: it would tax every
// allocation there.

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/// What the allocator was asked for between `roost_alloc_counter_start` and now.
typedef struct {
    /// malloc, calloc, posix_memalign, aligned_alloc, memalign, valloc,
    /// pvalloc, and realloc of a null pointer.
    uint64_t allocations;
    /// realloc of a live block to a nonzero size (may move it: a new block).
    uint64_t reallocations;
    /// free of a non-null pointer, and realloc to size 0.
    uint64_t frees;
    /// Bytes requested by the allocations and reallocations.
    uint64_t bytes;
} roost_alloc_counts;

/// Zeroes the counters and starts counting (every thread not excluded).
void roost_alloc_counter_start(void);
/// Stops counting and returns what was counted since the start.
roost_alloc_counts roost_alloc_counter_stop(void);
/// The counters so far, counting going on.
roost_alloc_counts roost_alloc_counter_read(void);
/// Excludes (1) or includes again (0) the calling thread: the measuring
/// client's own allocations are not the server's.
void roost_alloc_counter_exclude_current_thread(int excluded);
/// Returns 1 when this process's malloc is the counting one: a malloc made
/// by another shared object (libswiftCore's swift_slowAlloc) was counted.
/// Call it with counting stopped.
int roost_alloc_counter_check_interposed(void);

/// Backtraces (debug mode): from now on, while counting, each counted
/// allocation's call stack (up to `depth` frames, at most 32) is recorded in
/// a fixed table of distinct stacks with a count each. Costs a stack walk
/// per allocation: for finding sources, never for the counts themselves.
void roost_alloc_counter_record_backtraces(int depth);
/// Writes the `top` most frequent stacks to `fd`, largest first: a line
/// `stack N: COUNT allocations` followed by one symbolized frame a line
/// (backtrace_symbols_fd), then a blank line. Returns the number of
/// distinct stacks recorded, or -1 when the table overflowed (some
/// allocations were counted but not attributed).
int roost_alloc_counter_write_backtraces(int fd, int top);

#ifdef __cplusplus
}
#endif

#endif
