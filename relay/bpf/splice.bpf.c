// SPDX-License-Identifier: (MIT OR GPL-2.0)
//
// The kernel splice for held connections (docs/kernel-splice.md).
//
// A held connection's two sockets (the client's and the compute's, both the relay's) are in
// `sockets`, keyed by their socket cookies. The stream verdict below runs for every chunk of
// bytes either socket receives and, while the relay lets it, hands the chunk straight to the
// other socket's send side (bpf_sk_redirect_hash, egress): the relay's process is not woken.
// Otherwise (SK_PASS) the bytes wait in the socket for the relay to read, as without the
// splice.
//
// Ordering: the relay may have read bytes itself (it forwards them in userspace) before it
// turns the splice on. A chunk is redirected only when every byte passed to the relay
// before it has been forwarded by the relay (`passed == taken`), so the kernel never
// overtakes the relay.
//
// Built at build time by relay/build.rs (clang -target bpf); no object file is checked in.

#include <linux/bpf.h>

#define SEC(name) __attribute__((section(name), used))
#define __uint(name, val) int (*name)[val]
#define __type(name, val) typeof(val) *name

// The helpers this program calls, by their numbers in the kernel's UAPI (linux/bpf.h).
static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)BPF_FUNC_map_lookup_elem;
static __u64 (*bpf_ktime_get_ns)(void) = (void *)BPF_FUNC_ktime_get_ns;
static __u64 (*bpf_get_socket_cookie)(void *ctx) = (void *)BPF_FUNC_get_socket_cookie;
static long (*bpf_sk_redirect_hash)(struct __sk_buff *skb, void *map, void *key, __u64 flags) =
    (void *)BPF_FUNC_sk_redirect_hash;
static long (*bpf_skb_load_bytes)(const void *skb, __u32 offset, void *to, __u32 len) =
    (void *)BPF_FUNC_skb_load_bytes;

// Written by the relay only (relay/src/splice/sockhash.rs, `Control`; all u64, as the relay writes them).
struct control {
    __u64 peer;   // the other socket's cookie
    __u64 taken;  // bytes of this socket the relay has read and forwarded itself
    __u64 splice; // 1: redirect to the peer (when ordering allows); 0: pass to the relay
};

#define TAIL 32

// Written by this program only (relay/src/splice/sockhash.rs, `Stats`).
struct stats {
    __u64 passed;     // bytes passed to the relay
    __u64 redirected; // bytes redirected to the peer
    __u64 last_ns;    // CLOCK_MONOTONIC of the last bytes received
    __u64 used_ns;    // ... of the last bytes that were not a COM_PING or the reply to one
    __u64 pinged;     // 1 when the last bytes received were exactly one COM_PING
    __u8 tail[TAIL];  // the last TAIL bytes received (the compute's: its last packet)
};

#define MAX_SOCKETS 65536

struct {
    __uint(type, BPF_MAP_TYPE_SOCKHASH);
    __uint(max_entries, MAX_SOCKETS);
    __type(key, __u64);
    __type(value, __u32);
} sockets SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, MAX_SOCKETS);
    __type(key, __u64);
    __type(value, struct control);
} controls SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, MAX_SOCKETS);
    __type(key, __u64);
    __type(value, struct stats);
} stats SEC(".maps");

// Whether the chunk is exactly one COM_PING packet (sequence id 0), as pools send it: a
// pool's keepalive is not use of the instance (docs/parking.md).
static __attribute__((always_inline)) int is_ping(struct __sk_buff *skb)
{
    __u8 b[5];
    if (skb->len != 5 || bpf_skb_load_bytes(skb, 0, b, 5))
        return 0;
    return b[0] == 1 && b[1] == 0 && b[2] == 0 && b[3] == 0 && b[4] == 0x0e;
}

// Keeps the last TAIL bytes of the stream: the relay reads the status flags of the
// compute's last OK or EOF from them when it takes a quiet session back.
static __attribute__((always_inline)) void keep_tail(struct __sk_buff *skb, struct stats *s)
{
    __u32 len = skb->len;
    if (len >= TAIL) {
        bpf_skb_load_bytes(skb, len - TAIL, s->tail, TAIL);
        return;
    }
    if (len == 0)
        return;
    __u8 chunk[TAIL] = {};
    if (bpf_skb_load_bytes(skb, 0, chunk, len))
        return;
    for (__u32 i = 0; i < TAIL; i++) {
        __u32 from = i + len;
        s->tail[i] = from < TAIL ? s->tail[from & (TAIL - 1)] : chunk[(from - TAIL) & (TAIL - 1)];
    }
}

SEC("sk_skb/stream_verdict")
int splice_verdict(struct __sk_buff *skb)
{
    __u64 cookie = bpf_get_socket_cookie(skb);
    struct control *control = bpf_map_lookup_elem(&controls, &cookie);
    struct stats *stats_of = bpf_map_lookup_elem(&stats, &cookie);
    if (!control || !stats_of)
        return SK_PASS;
    // One socket's chunks are verdicted one at a time (under the socket's lock), so the
    // counters need no atomics; the relay only reads them.
    __u64 now = bpf_ktime_get_ns();
    stats_of->last_ns = now;
    if (is_ping(skb)) {
        stats_of->pinged = 1;
    } else {
        stats_of->pinged = 0;
        // The compute's bytes right after a ping are its reply.
        __u64 peer = control->peer;
        struct stats *peer_stats = bpf_map_lookup_elem(&stats, &peer);
        if (!peer_stats || !peer_stats->pinged)
            stats_of->used_ns = now;
    }
    keep_tail(skb, stats_of);
    if (control->splice && stats_of->passed == control->taken) {
        __u64 peer = control->peer;
        stats_of->redirected += skb->len;
        // SK_DROP when the peer has left the map (its socket closed): the relay sees that
        // close and ends the connection.
        return bpf_sk_redirect_hash(skb, &sockets, &peer, 0);
    }
    stats_of->passed += skb->len;
    return SK_PASS;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
