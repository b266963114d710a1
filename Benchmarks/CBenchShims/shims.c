#include "CBenchShims.h"

#include <stdint.h>
#include <sys/prctl.h>
#include <sys/timerfd.h>
#include <time.h>

int roost_bench_timerfd_create(void) {
    return timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
}

int roost_bench_timerfd_arm(int fd, uint64_t deadline_ns) {
    struct itimerspec spec = {0};
    spec.it_value.tv_sec = (time_t)(deadline_ns / 1000000000u);
    spec.it_value.tv_nsec = (long)(deadline_ns % 1000000000u);
    return timerfd_settime(fd, TFD_TIMER_ABSTIME, &spec, 0);
}

uint64_t roost_bench_monotonic_ns(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
}

int roost_bench_minimal_timer_slack(void) {
    return prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
}
