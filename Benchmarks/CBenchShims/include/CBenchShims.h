#ifndef ROOST_CBENCHSHIMS_H
#define ROOST_CBENCHSHIMS_H

// Calls the load generator needs that Swift's Glibc module does not import
// (timerfd, prctl is variadic). Benchmarks only: nothing in Sources uses them.

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/// A non-blocking, close-on-exec timerfd on CLOCK_MONOTONIC. Returns fd or -1.
int roost_bench_timerfd_create(void);
/// Arms the timer to fire once at the absolute CLOCK_MONOTONIC time
/// deadline_ns (0 disarms it); this also clears a past expiry, so the
/// descriptor stops being readable without a read. Returns 0 or -1 with errno.
int roost_bench_timerfd_arm(int fd, uint64_t deadline_ns);
/// CLOCK_MONOTONIC now, in nanoseconds (the clock the timer uses).
uint64_t roost_bench_monotonic_ns(void);
/// Sets this thread's timer slack to 1 ns so wake-ups are not batched by up
/// to 50 µs (the default). Returns 0 or -1 with errno.
int roost_bench_minimal_timer_slack(void);

#ifdef __cplusplus
}
#endif

#endif
