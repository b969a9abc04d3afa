# SPDX-License-Identifier: Apache-2.0
"""Delays every packet of an nfnetlink queue by a fixed time, for the chaos tests where
the kernel has no netem: a rule sends packets to queue N (iptables ... -j NFQUEUE
--queue-num N --queue-bypass), this program holds each one DELAY ms and then accepts it,
in arrival order. Python's standard library only: the netlink messages are packed by hand
(linux/netfilter/nfnetlink_queue.h). Only the packets' metadata is copied to user space.

  python3 chaos_delay.py QUEUE DELAY_MS [STATE_FILE]

Runs until SIGTERM. Creates STATE_FILE (empty) once bound, so a test knows the delay is in
place, and at SIGTERM writes there how many packets it delayed.
When the queue is full or no program is bound the kernel lets packets through
(fail-open, --queue-bypass): the delay is a lower bound on nothing but adds no loss."""
import collections
import os
import select
import signal
import socket
import struct
import sys
import time

NETLINK_NETFILTER = 12
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET, NFQNL_MSG_CONFIG, NFQNL_MSG_VERDICT_BATCH = 0, 2, 3
NFQA_CFG_CMD, NFQA_CFG_PARAMS, NFQA_CFG_QUEUE_MAXLEN, NFQA_CFG_MASK, NFQA_CFG_FLAGS = 1, 2, 3, 4, 5
NFQNL_CFG_CMD_BIND, NFQNL_COPY_META, NFQA_CFG_F_FAIL_OPEN = 1, 1, 1
NFQA_PACKET_HDR, NFQA_VERDICT_HDR = 1, 2
NLM_F_REQUEST, NLM_F_ACK = 1, 4
NLMSG_ERROR = 2
NF_ACCEPT = 1


def attr(kind, payload):
    a = struct.pack("=HH", 4 + len(payload), kind) + payload
    return a + b"\0" * (-len(a) % 4)


def message(kind, queue, attrs, flags=NLM_F_REQUEST, seq=0):
    body = struct.pack("=BBH", socket.AF_UNSPEC, 0, socket.htons(queue)) + b"".join(attrs)
    return struct.pack("=IHHII", 16 + len(body), (NFNL_SUBSYS_QUEUE << 8) | kind, flags, seq, 0) + body


def configure(sock, queue, attrs, seq):
    sock.send(message(NFQNL_MSG_CONFIG, queue, attrs, NLM_F_REQUEST | NLM_F_ACK, seq))
    data = sock.recv(65536)
    length, kind = struct.unpack_from("=IH", data)
    if kind == NLMSG_ERROR:
        err = struct.unpack_from("=i", data, 16)[0]
        if err != 0:
            raise OSError(-err, "nfnetlink_queue configuration: " + os.strerror(-err))


def packets(data):
    """The packet ids in one recv's worth of netlink messages."""
    off = 0
    while off + 16 <= len(data):
        length, kind = struct.unpack_from("=IH", data, off)
        if length < 16:
            break
        if kind & 0xFF == NFQNL_MSG_PACKET and kind >> 8 == NFNL_SUBSYS_QUEUE:
            a = off + 20  # past nlmsghdr (16) and nfgenmsg (4)
            while a + 4 <= off + length:
                alen, akind = struct.unpack_from("=HH", data, a)
                if alen < 4:
                    break
                if akind & 0x7FFF == NFQA_PACKET_HDR:
                    yield struct.unpack_from(">I", data, a + 4)[0]
                a += (alen + 3) & ~3
        off += (length + 3) & ~3


def main():
    queue, delay = int(sys.argv[1]), float(sys.argv[2]) / 1000.0
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
    sock.bind((0, 0))
    try:
        sock.setsockopt(socket.SOL_SOCKET, 33, 8 << 20)  # SO_RCVBUFFORCE (we are root)
    except OSError:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    configure(sock, queue, [attr(NFQA_CFG_CMD, struct.pack(">BBH", NFQNL_CFG_CMD_BIND, 0, 0))], 1)
    configure(sock, queue, [attr(NFQA_CFG_PARAMS, struct.pack(">IB", 0, NFQNL_COPY_META)),
                            attr(NFQA_CFG_QUEUE_MAXLEN, struct.pack(">I", 16384)),
                            attr(NFQA_CFG_MASK, struct.pack(">I", NFQA_CFG_F_FAIL_OPEN)),
                            attr(NFQA_CFG_FLAGS, struct.pack(">I", NFQA_CFG_F_FAIL_OPEN))], 2)
    state = sys.argv[3] if len(sys.argv) > 3 else None
    count = [0]

    def stop(*_):
        if state:
            with open(state, "w") as f:
                f.write("%d\n" % count[0])
        sys.exit(0)
    signal.signal(signal.SIGTERM, stop)
    if state:
        open(state, "w").close()
    held = collections.deque()  # (due time, packet id), in arrival order
    while True:
        timeout = max(0.0, held[0][0] - time.monotonic()) if held else None
        if select.select([sock], [], [], timeout)[0]:
            try:
                data = sock.recv(1 << 20)
            except OSError:  # ENOBUFS: messages lost; the batch verdict below covers them
                data = b""
            due = time.monotonic() + delay
            for pid in packets(data):
                held.append((due, pid))
                count[0] += 1
        now, last = time.monotonic(), None
        while held and held[0][0] <= now:
            last = held.popleft()[1]
        if last is not None:  # accepts every held packet up to this id at once
            sock.send(message(NFQNL_MSG_VERDICT_BATCH, queue,
                              [attr(NFQA_VERDICT_HDR, struct.pack(">II", NF_ACCEPT, last))]))


if __name__ == "__main__":
    main()
