#define _GNU_SOURCE
#include "CSystemShims.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

const uint32_t roost_epoll_in = EPOLLIN;
const uint32_t roost_epoll_out = EPOLLOUT;
const uint32_t roost_epoll_err = EPOLLERR;
const uint32_t roost_epoll_hup = EPOLLHUP;
const uint32_t roost_epoll_rdhup = EPOLLRDHUP;
const uint32_t roost_epoll_et = EPOLLET;

int roost_set_nonblocking(int fd) {
    int flags = fcntl(fd, F_GETFL, 0);
    if (flags < 0) return -1;
    return fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

int roost_epoll_create(void) { return epoll_create1(EPOLL_CLOEXEC); }

static int epoll_ctl_token(int epfd, int op, int fd, uint32_t events, uint64_t token) {
    struct epoll_event ev;
    memset(&ev, 0, sizeof ev);
    ev.events = events;
    ev.data.u64 = token;
    return epoll_ctl(epfd, op, fd, &ev);
}

int roost_epoll_add(int epfd, int fd, uint32_t events, uint64_t token) {
    return epoll_ctl_token(epfd, EPOLL_CTL_ADD, fd, events, token);
}

int roost_epoll_modify(int epfd, int fd, uint32_t events, uint64_t token) {
    return epoll_ctl_token(epfd, EPOLL_CTL_MOD, fd, events, token);
}

int roost_epoll_remove(int epfd, int fd) { return epoll_ctl(epfd, EPOLL_CTL_DEL, fd, NULL); }

int roost_epoll_wait(int epfd, roost_ready_event *out, int capacity, int timeout_ms) {
    struct epoll_event events[256];
    if (capacity > 256) capacity = 256;
    int n;
    do {
        n = epoll_wait(epfd, events, capacity, timeout_ms);
    } while (n < 0 && errno == EINTR);
    for (int i = 0; i < n; i++) {
        out[i].token = events[i].data.u64;
        out[i].events = events[i].events;
    }
    return n;
}

int roost_eventfd_create(void) { return eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC); }

int roost_eventfd_signal(int fd) {
    uint64_t one = 1;
    ssize_t n;
    do {
        n = write(fd, &one, sizeof one);
    } while (n < 0 && errno == EINTR);
    /* EAGAIN means the counter is saturated: the reader will wake anyway. */
    return (n == (ssize_t)sizeof one || (n < 0 && errno == EAGAIN)) ? 0 : -1;
}

int roost_eventfd_drain(int fd) {
    uint64_t value;
    ssize_t n;
    do {
        n = read(fd, &value, sizeof value);
    } while (n < 0 && errno == EINTR);
    return (n == (ssize_t)sizeof value || (n < 0 && errno == EAGAIN)) ? 0 : -1;
}

/* Fills `address` from a numeric host: an IPv6 address when it holds a ':'
 * (no brackets), else an IPv4 dotted quad. Returns the address length, or 0
 * with errno = EINVAL when the host is neither. */
static socklen_t roost_socket_address(const char *host, uint16_t port, struct sockaddr_storage *address) {
    memset(address, 0, sizeof *address);
    if (strchr(host, ':') != NULL) {
        struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)address;
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons(port);
        if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) return sizeof *v6;
    } else {
        struct sockaddr_in *v4 = (struct sockaddr_in *)address;
        v4->sin_family = AF_INET;
        v4->sin_port = htons(port);
        if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) return sizeof *v4;
    }
    errno = EINVAL;
    return 0;
}

int roost_tcp_listen(const char *host, uint16_t port, int backlog, int reuse_port) {
    struct sockaddr_storage address;
    socklen_t length = roost_socket_address(host, port, &address);
    if (length == 0) return -1;
    int fd = socket(address.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    int one = 1;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0) goto fail;
    if (reuse_port && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) < 0) goto fail;
    /* [::] means IPv6 only, whatever net.ipv6.bindv6only says (as nginx does). */
    if (address.ss_family == AF_INET6 && setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one) < 0) goto fail;
    if (bind(fd, (struct sockaddr *)&address, length) < 0) goto fail;
    if (listen(fd, backlog) < 0) goto fail;
    return fd;
fail: {
    int saved = errno;
    close(fd);
    errno = saved;
    return -1;
}
}

int roost_socket_port(int fd) {
    struct sockaddr_storage address;
    socklen_t length = sizeof address;
    if (getsockname(fd, (struct sockaddr *)&address, &length) < 0) return -1;
    if (address.ss_family == AF_INET6) return ntohs(((struct sockaddr_in6 *)&address)->sin6_port);
    return ntohs(((struct sockaddr_in *)&address)->sin_port);
}

int roost_accept(int listen_fd) {
    int fd;
    do {
        fd = accept4(listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    } while (fd < 0 && errno == EINTR);
    if (fd >= 0) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    return fd;
}

static void roost_mapped_ipv4(const struct in_addr *ipv4, uint8_t out[16]) {
    memset(out, 0, 10);
    out[10] = 0xff;
    out[11] = 0xff;
    memcpy(out + 12, &ipv4->s_addr, 4);
}

int roost_peer_address(int fd, uint8_t out[16]) {
    struct sockaddr_storage storage;
    socklen_t len = sizeof storage;
    if (getpeername(fd, (struct sockaddr *)&storage, &len) < 0) return -1;
    if (storage.ss_family == AF_INET) {
        roost_mapped_ipv4(&((struct sockaddr_in *)&storage)->sin_addr, out);
        return 0;
    }
    if (storage.ss_family == AF_INET6) {
        memcpy(out, &((struct sockaddr_in6 *)&storage)->sin6_addr, 16);
        return 0;
    }
    errno = EAFNOSUPPORT;
    return -1;
}

int roost_parse_ip_address(const char *text, uint8_t out[16]) {
    struct in_addr ipv4;
    if (inet_pton(AF_INET, text, &ipv4) == 1) {
        roost_mapped_ipv4(&ipv4, out);
        return 1;
    }
    struct in6_addr ipv6;
    if (inet_pton(AF_INET6, text, &ipv6) == 1) {
        memcpy(out, &ipv6, 16);
        return 1;
    }
    return 0;
}

int roost_format_ip_address(const uint8_t address[16], char *out, size_t capacity) {
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (memcmp(address, mapped, 12) == 0) {
        return inet_ntop(AF_INET, address + 12, out, (socklen_t)capacity) ? 0 : -1;
    }
    return inet_ntop(AF_INET6, address, out, (socklen_t)capacity) ? 0 : -1;
}

int roost_tcp_connect(const char *host, uint16_t port) {
    struct sockaddr_storage address;
    socklen_t length = roost_socket_address(host, port, &address);
    if (length == 0) return -1;
    int fd = socket(address.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    int rc;
    do {
        rc = connect(fd, (struct sockaddr *)&address, length);
    } while (rc < 0 && errno == EINTR);
    if (rc < 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

int roost_tcp_connect_start(const char *host, uint16_t port, int *in_progress) {
    *in_progress = 0;
    struct sockaddr_storage address;
    socklen_t length = roost_socket_address(host, port, &address);
    if (length == 0) return -1;
    int fd = socket(address.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    /* A non-blocking connect interrupted by a signal goes on in the
     * background (EINTR): it is then in progress, like EINPROGRESS. */
    if (connect(fd, (struct sockaddr *)&address, length) < 0) {
        if (errno == EINPROGRESS || errno == EINTR) {
            *in_progress = 1;
            return fd;
        }
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    return fd;
}

int roost_socket_error(int fd) {
    int error = 0;
    socklen_t length = sizeof error;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) < 0) return -1;
    return error;
}

int roost_set_receive_timeout(int fd, int timeout_ms) {
    struct timeval tv;
    tv.tv_sec = timeout_ms / 1000;
    tv.tv_usec = (timeout_ms % 1000) * 1000;
    return setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
}

/* ---- CRC-32C ---------------------------------------------------------- */

static uint32_t crc32c_table[256];
static int crc32c_table_ready = 0;

static void crc32c_build_table(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : (c >> 1);
        crc32c_table[i] = c;
    }
    __atomic_store_n(&crc32c_table_ready, 1, __ATOMIC_RELEASE);
}

static uint32_t crc32c_portable(uint32_t crc, const uint8_t *p, size_t n) {
    if (!__atomic_load_n(&crc32c_table_ready, __ATOMIC_ACQUIRE)) crc32c_build_table();
    while (n--) crc = crc32c_table[(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc32c_sse42(uint32_t crc, const uint8_t *p, size_t n) {
    uint64_t c = crc;
    while (n >= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        c = __builtin_ia32_crc32di(c, word);
        p += 8;
        n -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (n--) c32 = __builtin_ia32_crc32qi(c32, *p++);
    return c32;
}
#endif

uint32_t roost_crc32c(uint32_t crc, const void *data, size_t length) {
    const uint8_t *p = (const uint8_t *)data;
    uint32_t c = ~crc;
#if defined(__x86_64__)
    if (__builtin_cpu_supports("sse4.2")) return ~crc32c_sse42(c, p, length);
#endif
    return ~crc32c_portable(c, p, length);
}

int roost_malloc_trim(void) { return malloc_trim(0); }

int roost_malloc_set_mmap_threshold(int bytes) { return mallopt(M_MMAP_THRESHOLD, bytes); }
