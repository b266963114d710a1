#ifndef ROOST_CSYSTEMSHIMS_H
#define ROOST_CSYSTEMSHIMS_H

// Non-variadic, macro-free entry points for the Linux calls Swift cannot
// import directly (variadic fcntl, epoll_event's packed layout, CRC-32C).

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/// Sets O_NONBLOCK on a descriptor. Returns 0 or -1 with errno.
int roost_set_nonblocking(int fd);

/// epoll: create with EPOLL_CLOEXEC; add/modify/remove with a 64-bit token.
int roost_epoll_create(void);
int roost_epoll_add(int epfd, int fd, uint32_t events, uint64_t token);
int roost_epoll_modify(int epfd, int fd, uint32_t events, uint64_t token);
int roost_epoll_remove(int epfd, int fd);

/// One ready event, unpacked from the kernel's packed epoll_event.
typedef struct roost_ready_event {
    uint64_t token;
    uint32_t events;
} roost_ready_event;

/// Waits up to timeout_ms and fills at most capacity events. Returns the count or -1.
int roost_epoll_wait(int epfd, roost_ready_event *out, int capacity, int timeout_ms);

extern const uint32_t roost_epoll_in;
extern const uint32_t roost_epoll_out;
extern const uint32_t roost_epoll_err;
extern const uint32_t roost_epoll_hup;
extern const uint32_t roost_epoll_rdhup;
extern const uint32_t roost_epoll_et;

/// eventfd (non-blocking, close-on-exec) for cross-thread wake-ups.
int roost_eventfd_create(void);
int roost_eventfd_signal(int fd);
int roost_eventfd_drain(int fd);

/// A TCP listening socket on host:port (an IPv4 dotted quad, or an IPv6 address
/// without brackets: then IPV6_V6ONLY), SO_REUSEADDR and, when reuse_port != 0,
/// SO_REUSEPORT. Non-blocking. Returns fd or -1 (EINVAL for a host that is neither).
int roost_tcp_listen(const char *host, uint16_t port, int backlog, int reuse_port);
/// The bound port of a socket, or -1.
int roost_socket_port(int fd);
/// accept4 with SOCK_NONBLOCK|SOCK_CLOEXEC, and TCP_NODELAY set on the result.
int roost_accept(int listen_fd);
/// The peer address of a connected socket as 16 bytes (an IPv4 peer in its
/// IPv4-mapped IPv6 form ::ffff:a.b.c.d). Returns 0, or -1 with errno.
int roost_peer_address(int fd, uint8_t out[16]);
/// Parses IPv4 dotted-quad or IPv6 text (inet_pton) into 16 bytes as
/// roost_peer_address writes them. Returns 1 when parsed, else 0.
int roost_parse_ip_address(const char *text, uint8_t out[16]);
/// Writes the text form of 16 address bytes (dotted quad for an IPv4-mapped
/// one) into out (at least 46 bytes). Returns 0, or -1.
int roost_format_ip_address(const uint8_t address[16], char *out, size_t capacity);
/// A blocking TCP client connection to host:port (IPv4 or IPv6, as for
/// roost_tcp_listen), TCP_NODELAY. Returns fd or -1.
int roost_tcp_connect(const char *host, uint16_t port);

/// Sets SO_RCVTIMEO on a blocking socket (0 clears it). Returns 0 or -1 with errno.
int roost_set_receive_timeout(int fd, int timeout_ms);
/// Starts a TCP client connection to host:port (IPv4 or IPv6, as for
/// roost_tcp_listen) on a non-blocking, close-on-exec socket with TCP_NODELAY.
/// Returns fd with *in_progress = 1 while the connection is being made (wait
/// for POLLOUT, then read roost_socket_error), 0 when already connected; or -1.
int roost_tcp_connect_start(const char *host, uint16_t port, int *in_progress);
/// The pending error of a socket (SO_ERROR; 0: none). Returns it, or -1 with errno.
int roost_socket_error(int fd);

/// CRC-32C (Castagnoli), continuing from crc (pass 0 to start).
/// Uses the SSE4.2 crc32 instruction when the CPU has it, else a table.
uint32_t roost_crc32c(uint32_t crc, const void *data, size_t length);

/// glibc malloc_trim(0): gives the kernel back the free memory at the top of
/// every arena and the free whole pages inside them. Returns 1 if any was
/// released. O(heap): walks every arena's free chunks.
int roost_malloc_trim(void);
/// glibc mallopt(M_MMAP_THRESHOLD, bytes): allocations of at least `bytes`
/// are mapped on their own and unmapped when freed. Setting it also turns
/// off glibc's dynamic threshold, which otherwise rises to the largest block
/// freed (up to 32 MiB) and keeps such blocks in the heap. Returns 1 on success.
int roost_malloc_set_mmap_threshold(int bytes);

#ifdef __cplusplus
}
#endif

#endif
