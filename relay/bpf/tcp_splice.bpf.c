// SPDX-License-Identifier: (MIT OR GPL-2.0)
//
// The TCP splice for held connections (docs/kernel-splice.md, "Below TCP").
//
// A held connection is two TCP connections through the relay: client <-> relay and
// relay <-> compute. Spliced here, each segment the client sends to the relay is rewritten,
// at the ingress of the interface it arrives on (loopback, or the link toward the client's
// host) and before any socket sees it, into the segment the relay would have sent the
// compute for it: the relay's compute-side addresses and ports, the sequence number moved
// into the relay's sequence space on that connection, the acknowledgement moved into the
// compute's, the timestamps and the window carried across. The compute's segments go the
// other way. A segment for another host leaves at once through the interface toward it
// (bpf_redirect_neigh). Each end then talks to the other through one TCP connection's worth
// of kernel work, as if the relay were not there; the relay's own sockets see nothing until
// it takes the session back (relay/src/splice/below_tcp.rs).
//
// Built at build time by relay/build.rs (clang -target bpf); no object file is checked in.

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <linux/tcp.h>

#define SEC(name) __attribute__((section(name), used))
#define __uint(name, val) int (*name)[val]
#define __type(name, val) typeof(val) *name

static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)BPF_FUNC_map_lookup_elem;
static __u64 (*bpf_ktime_get_ns)(void) = (void *)BPF_FUNC_ktime_get_ns;
static long (*bpf_skb_load_bytes)(const void *skb, __u32 offset, void *to, __u32 len) =
    (void *)BPF_FUNC_skb_load_bytes;
static long (*bpf_skb_store_bytes)(void *skb, __u32 offset, const void *from, __u32 len,
                                   __u64 flags) = (void *)BPF_FUNC_skb_store_bytes;
static long (*bpf_l3_csum_replace)(void *skb, __u32 offset, __u64 from, __u64 to, __u64 size) =
    (void *)BPF_FUNC_l3_csum_replace;
static long (*bpf_l4_csum_replace)(void *skb, __u32 offset, __u64 from, __u64 to, __u64 flags) =
    (void *)BPF_FUNC_l4_csum_replace;
static long (*bpf_redirect_neigh)(__u32 ifindex, void *params, int plen, __u64 flags) =
    (void *)BPF_FUNC_redirect_neigh;

#define AF_INET 2 // the C library's (bits/socket.h), not in the kernel's UAPI headers
#define bswap32(x) __builtin_bswap32(x)
#define bswap16(x) __builtin_bswap16(x)

// One direction of a spliced connection, keyed by the segment's addresses and ports as they
// are on the wire (network byte order).
struct flow_key {
    __u32 saddr;
    __u32 daddr;
    __u16 sport;
    __u16 dport;
};

// Written by the relay only (relay/src/splice/below_tcp.rs, `Control`; all u64, as it writes them).
struct control {
    __u64 saddr, daddr, sport, dport; // the segment's new addresses and ports (wire order)
    __u64 seq_delta;                  // added to the sequence number
    __u64 ack_delta;                  // added to the acknowledgement and SACK edges
    __u64 rewrite;                    // 1: rewrite; 0: drop (the relay is taking it back)
    __u64 win_in, win_out;            // window field: << win_in (the sender's scale), >> win_out
    __u64 ts_base;                    // the relay's own timestamp clock on the outgoing leg, ms
    __u64 setup_ns;                   // CLOCK_MONOTONIC when ts_base was read
    __u64 reverse[2];                 // the other direction's struct flow_key
    __u64 ifindex;                    // 0: on to the local stack (loopback); else out of it
    __u64 nexthop;                    // ... to this next hop (IPv4, wire order)
};

#define TAIL 32

// Written by this program only (relay/src/splice/below_tcp.rs, `Stats`).
struct stats {
    __u64 seq_end;    // the highest sequence number sent, plus one (a FIN counts), as received
    __u64 ack_max;    // the highest acknowledgement, as received
    __u64 window;     // the last window field, as received (unscaled)
    __u64 ts_delta;   // added to the timestamp value, once ts_set
    __u64 ts_set;
    __u64 tsval_out;  // the last timestamp value sent on (after the delta)
    __u64 ended;      // 1: a FIN went through; 2: a reset
    __u64 bytes;      // payload bytes
    __u64 last_ns;    // CLOCK_MONOTONIC of the last payload
    __u64 used_ns;    // ... of the last payload that was not a COM_PING or the reply to one
    __u64 pinged;     // 1 when the last payload was exactly one COM_PING
    __u64 tail_len;   // how many bytes of tail hold the last segment's end
    __u64 tail_prev_len;
    __u64 tail_end;   // the sequence number after the last segment's payload (ends tail)
    __u64 tail_prev_end; // ... after the one's before it (ends tail_prev)
    __u8 tail[TAIL];  // the last segment's last TAIL payload bytes (the compute's: its last packet)
    __u8 tail_prev[TAIL]; // the segment's before it
};

#define MAX_FLOWS 131072

// Not preallocated: an element the relay replaces or deletes is freed only once every
// program that may still read it has finished (RCU), so a segment never sees another
// session's values; and a relay whose instances do not splice below TCP pays no memory.
struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, MAX_FLOWS);
    __uint(map_flags, BPF_F_NO_PREALLOC);
    __type(key, struct flow_key);
    __type(value, struct control);
} controls SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, MAX_FLOWS);
    __uint(map_flags, BPF_F_NO_PREALLOC);
    __type(key, struct flow_key);
    __type(value, struct stats);
} stats SEC(".maps");

#define IP_OFF ETH_HLEN
#define IP_CSUM_OFF (IP_OFF + 10)
#define IP_SADDR_OFF (IP_OFF + 12)
#define IP_DADDR_OFF (IP_OFF + 16)

#define OPT_MAX 40

// Replaces 4 bytes of the TCP header at `off` and fixes the checksum (a header field, not
// the pseudo-header: with CHECKSUM_PARTIAL the helper leaves the checksum to the device).
static __attribute__((always_inline)) void put32(struct __sk_buff *skb, __u32 tcp_off, __u32 off,
                                                 __u32 old, __u32 new)
{
    bpf_l4_csum_replace(skb, tcp_off + 16, old, new, 4);
    bpf_skb_store_bytes(skb, off, &new, 4, 0);
}

static __attribute__((always_inline)) void put16(struct __sk_buff *skb, __u32 tcp_off, __u32 off,
                                                 __u16 old, __u16 new)
{
    if (old == new)
        return;
    bpf_l4_csum_replace(skb, tcp_off + 16, old, new, 2);
    bpf_skb_store_bytes(skb, off, &new, 2, 0);
}

static __attribute__((always_inline)) int after(__u32 a, __u32 b)
{
    return (__s32)(a - b) > 0;
}

// Raises *p to v (sequence order). Segments of one direction are usually seen one at a time,
// but two CPUs may handle two of them at once: compare-and-swap, so that the highest stays.
// Returns how far it was raised (0: not).
static __attribute__((always_inline)) __u32 raise(__u64 *p, __u32 v)
{
    for (int i = 0; i < 4; i++) {
        __u64 old = *p;
        if (!after(v, (__u32)old))
            return 0;
        if (__sync_val_compare_and_swap(p, old, (__u64)v) == old)
            return v - (__u32)old;
    }
    return 0;
}

// Whether the payload is exactly one COM_PING packet (sequence id 0), as pools send it.
static __attribute__((always_inline)) int is_ping(struct __sk_buff *skb, __u32 off, __u32 len)
{
    __u8 b[5];
    if (len != 5 || bpf_skb_load_bytes(skb, off, b, 5))
        return 0;
    return b[0] == 1 && b[1] == 0 && b[2] == 0 && b[3] == 0 && b[4] == 0x0e;
}

// Keeps the last TAIL payload bytes of this segment and of the one before: the relay joins
// them (the compute's last packet is short, and may straddle two segments).
static __attribute__((always_inline)) void keep_tail(struct __sk_buff *skb, __u32 off, __u32 len,
                                                     struct stats *s)
{
    __builtin_memcpy(s->tail_prev, s->tail, TAIL);
    s->tail_prev_len = s->tail_len;
    if (len >= TAIL) {
        if (bpf_skb_load_bytes(skb, off + len - TAIL, s->tail, TAIL) == 0)
            s->tail_len = TAIL;
        return;
    }
    // len is 1 to TAIL - 1 here; written so that the verifier sees it is not 0.
    __u32 n = ((len - 1) & (TAIL - 1)) + 1;
    if (len > 0 && bpf_skb_load_bytes(skb, off, s->tail, n) == 0)
        s->tail_len = n;
}

// Segments not spliced here go on to the next program (TC_ACT_UNSPEC: a second relay on the
// host has its own). Rewritten ones are passed up the stack (TC_ACT_OK) when their new
// destination is on this host (loopback), or sent out of the interface toward it, its
// link-layer addresses filled in from the neighbour table (another host).
SEC("classifier")
int tcp_splice(struct __sk_buff *skb)
{
    if (skb->protocol != bswap16(ETH_P_IP))
        return TC_ACT_UNSPEC;
    struct iphdr ip;
    if (bpf_skb_load_bytes(skb, IP_OFF, &ip, sizeof(ip)) || ip.protocol != IPPROTO_TCP)
        return TC_ACT_UNSPEC;
    __u32 tcp_off = IP_OFF + ip.ihl * 4;
    if (ip.ihl < 5 || ip.ihl > 15)
        return TC_ACT_UNSPEC;
    struct tcphdr tcp;
    if (bpf_skb_load_bytes(skb, tcp_off, &tcp, sizeof(tcp)))
        return TC_ACT_UNSPEC;
    struct flow_key key = {ip.saddr, ip.daddr, tcp.source, tcp.dest};
    struct control *c = bpf_map_lookup_elem(&controls, &key);
    if (!c)
        return TC_ACT_UNSPEC;
    struct stats *s = bpf_map_lookup_elem(&stats, &key);
    if (!s || !c->rewrite)
        return TC_ACT_SHOT;

    __u32 doff = tcp.doff * 4;
    if (doff < 20 || doff > 60)
        return TC_ACT_SHOT;
    __u32 payload_off = tcp_off + doff;
    // The IP header's length, not the frame's: an Ethernet frame shorter than 60 bytes (a
    // bare ACK without timestamps) arrives padded, and the padding is no payload. A length of
    // 0 is a GRO packet over 64 KB (BIG TCP): then the frame's.
    __u32 ip_len = bswap16(ip.tot_len);
    __u32 end = ip_len ? IP_OFF + ip_len : skb->len;
    if (end > skb->len)
        end = skb->len;
    __u32 len = end > payload_off ? end - payload_off : 0;
    __u64 now = bpf_ktime_get_ns();

    // What the relay reads when it takes the session back.
    __u32 seq = bswap32(tcp.seq);
    // Payload bytes counted once, however often they are sent again.
    __u32 fresh = raise(&s->seq_end, seq + len);
    if (tcp.fin)
        raise(&s->seq_end, seq + len + 1);
    __u32 ack = bswap32(tcp.ack_seq);
    if (tcp.ack)
        raise(&s->ack_max, ack);
    s->window = bswap16(tcp.window);
    // A reset ends the session only at exactly the next sequence number expected, as the
    // receiver itself accepts one (RFC 5961): a blind one elsewhere in the window gets a
    // challenge ACK from the end, and must not end the relay's record of the session.
    if (tcp.rst && seq == (__u32)s->seq_end)
        s->ended = 2;
    else if (tcp.fin && !s->ended)
        s->ended = 1;
    struct stats *peer = bpf_map_lookup_elem(&stats, c->reverse);
    if (fresh)
        __sync_fetch_and_add(&s->bytes, fresh);
    if (len) {
        s->last_ns = now;
        if (is_ping(skb, payload_off, len)) {
            s->pinged = 1;
        } else {
            s->pinged = 0;
            // The compute's bytes right after a ping are its reply.
            if (!peer || !peer->pinged)
                s->used_ns = now;
        }
        s->tail_prev_end = s->tail_end;
        keep_tail(skb, payload_off, len, s);
        s->tail_end = seq + len;
    }

    // The timestamps: the value moved onto the relay's clock on the outgoing leg (from where
    // that clock stood at the splice, so it never goes back), the echo moved back by the
    // other direction's delta (0, "no echo", before the other side has sent anything).
    __u32 opt_len = doff - 20;
    if (opt_len > 0 && opt_len <= OPT_MAX) {
        // Linux lays out an established connection's options as NOP, NOP, timestamps,
        // then NOP, NOP, SACK (tcp_options_write), as RFC 7323 (appendix A) suggests and
        // other systems do too: look there. A peer that lays them out otherwise has its
        // timestamps passed on unchanged, which the other end drops (PAWS).
        __u32 ts_at = 0, sack_at = 0, sack_len = 0;
        __u8 head[4] = {};
        if (bpf_skb_load_bytes(skb, tcp_off + 20, head, 4) == 0 && head[0] == 1 && head[1] == 1 &&
            head[2] == 8 && head[3] == 10)
            ts_at = tcp_off + 20 + 2;
        __u32 sack_opt = ts_at ? 12 : 0;
        if (opt_len >= sack_opt + 4 &&
            bpf_skb_load_bytes(skb, tcp_off + 20 + sack_opt, head, 4) == 0 && head[0] == 1 &&
            head[1] == 1 && head[2] == 5 && head[3] >= 10 && sack_opt + 2 + head[3] <= opt_len) {
            sack_at = tcp_off + 20 + sack_opt + 2;
            sack_len = head[3];
        }
        if (ts_at) {
            __u32 tsval, tsecr;
            if (bpf_skb_load_bytes(skb, ts_at + 2, &tsval, 4) ||
                bpf_skb_load_bytes(skb, ts_at + 6, &tsecr, 4))
                return TC_ACT_SHOT;
            __u32 v = bswap32(tsval);
            if (!s->ts_set) {
                __u32 clock = (__u32)c->ts_base + (__u32)((now - c->setup_ns) / 1000000);
                s->ts_delta = (__u32)(clock - v);
                s->ts_set = 1;
            }
            __u32 v_out = v + (__u32)s->ts_delta;
            s->tsval_out = v_out;
            __u32 e_out = 0;
            if (peer && peer->ts_set)
                e_out = bswap32(bswap32(tsecr) - (__u32)peer->ts_delta);
            put32(skb, tcp_off, ts_at + 2, tsval, bswap32(v_out));
            put32(skb, tcp_off, ts_at + 6, tsecr, e_out);
        }
        // SACK edges acknowledge the other direction's bytes, as the ack does.
        for (__u32 e = 0; e < 8 && sack_at; e++) {
            // At most four blocks (eight edges) fit in the options.
            __u32 edge_at = 2 + e * 4;
            if (edge_at + 4 > sack_len)
                break;
            __u32 edge;
            if (bpf_skb_load_bytes(skb, sack_at + edge_at, &edge, 4))
                return TC_ACT_SHOT;
            put32(skb, tcp_off, sack_at + edge_at, edge, bswap32(bswap32(edge) + (__u32)c->ack_delta));
        }
    }

    // The window: the same number of bytes, in the outgoing leg's scale.
    // Rounded up, as the kernel rounds a window it scales (a small one never becomes 0).
    __u32 out_shift = c->win_out & 15;
    __u32 bytes_open = (__u32)bswap16(tcp.window) << (c->win_in & 15);
    bytes_open = (bytes_open + (1U << out_shift) - 1) >> out_shift;
    __u16 window = bswap16(bytes_open > 0xffff ? 0xffff : bytes_open);
    put16(skb, tcp_off, tcp_off + 14, tcp.window, window);

    put32(skb, tcp_off, tcp_off + 4, tcp.seq, bswap32(seq + (__u32)c->seq_delta));
    if (tcp.ack)
        put32(skb, tcp_off, tcp_off + 8, tcp.ack_seq, bswap32(ack + (__u32)c->ack_delta));

    // Ports (in the TCP checksum) and addresses (in both checksums: the TCP one through its
    // pseudo-header).
    __u32 ports_old = (__u32)tcp.source | ((__u32)tcp.dest << 16);
    __u32 ports_new = (__u32)(__u16)c->sport | ((__u32)(__u16)c->dport << 16);
    put32(skb, tcp_off, tcp_off, ports_old, ports_new);
    __u32 saddr = (__u32)c->saddr, daddr = (__u32)c->daddr;
    if (saddr != ip.saddr) {
        bpf_l4_csum_replace(skb, tcp_off + 16, ip.saddr, saddr, BPF_F_PSEUDO_HDR | 4);
        bpf_l3_csum_replace(skb, IP_CSUM_OFF, ip.saddr, saddr, 4);
        bpf_skb_store_bytes(skb, IP_SADDR_OFF, &saddr, 4, 0);
    }
    if (daddr != ip.daddr) {
        bpf_l4_csum_replace(skb, tcp_off + 16, ip.daddr, daddr, BPF_F_PSEUDO_HDR | 4);
        bpf_l3_csum_replace(skb, IP_CSUM_OFF, ip.daddr, daddr, 4);
        bpf_skb_store_bytes(skb, IP_DADDR_OFF, &daddr, 4, 0);
    }
    if (!c->ifindex)
        return TC_ACT_OK;
    // Out of the relay's host without its IP stack: no routing decision (the relay looked up
    // the route at the splice), no netfilter, no reverse-path filter (the new source is the
    // relay's own address). The helper finds the next hop's link-layer address.
    struct bpf_redir_neigh nh = {.nh_family = AF_INET, .ipv4_nh = (__u32)c->nexthop};
    return bpf_redirect_neigh((__u32)c->ifindex, &nh, sizeof(nh), 0);
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
