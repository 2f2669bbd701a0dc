package probe

import (
	"context"
	"errors"
	"net"
	"net/netip"

	"github.com/cnperf/cnperf/internal/probe/udpio"
)

// Receive-path sizing of the shared UDP socket.
const (
	// udpReadBatch is how many datagrams (or GRO super-packets of up to
	// 64 KiB) one recvmmsg call takes.
	udpReadBatch = 32
	// udpRecvBuffer is the receive buffer asked for (SO_RCVBUFFORCE as
	// root, else SO_RCVBUF up to net.core.rmem_max).
	udpRecvBuffer = 32 << 20
)

// readUDP is the responder's UDP reader: it reads in batches (recvmmsg, and
// UDP GRO where the kernel has it), splits merged datagrams back into the
// ones that were sent, and demultiplexes each to its session's PacketFunc by
// the session id in the packet header.
func (r *Responder) readUDP(ctx context.Context) {
	if _, err := udpio.SetRecvBuffer(r.udp, udpRecvBuffer); err != nil {
		r.log.Info("udp receive buffer", "err", err)
	}
	rcv, err := udpio.NewReceiver(r.udp, udpReadBatch, 1<<16, udpio.Options{})
	if err != nil {
		r.log.Warn("batched udp reads unavailable; reading one datagram per call", "err", err)
		rcv, err = udpio.NewReceiver(r.udp, 1, 1<<16, udpio.Options{NoBatch: true})
		if err != nil {
			r.log.Error("udp reader", "err", err)
			return
		}
	}
	for _, n := range rcv.Notes() {
		r.log.Info(n)
	}
	r.udpReadMode.Store(rcv.Mode().RecvString())
	// The session of the previous datagram, looked up once per batch run.
	var (
		lastID SessionID
		lastFn PacketFunc
	)
	deliver := func(pkt []byte, from netip.AddrPort, m *udpio.Meta) {
		h, ok := ParsePacketHeader(pkt)
		if !ok {
			if r.foreign != nil {
				r.foreign.Packet(pkt, from, RxInfo{TOS: m.TOS, TOSOK: m.TOSOK, KernelNs: m.KernelNs})
			}
			return
		}
		if lastFn == nil || h.Session != lastID {
			v, ok := r.packetFns.Load(h.Session)
			if !ok {
				return
			}
			lastID, lastFn = h.Session, v.(PacketFunc)
		}
		lastFn(pkt, from, RxInfo{TOS: m.TOS, TOSOK: m.TOSOK, KernelNs: m.KernelNs, Drops: m.Drops, DropsOK: m.DropsOK})
	}
	for ctx.Err() == nil {
		lastFn = nil // a session may have ended since the last batch
		if _, err := rcv.Recv(deliver); err != nil {
			if errors.Is(err, net.ErrClosed) || ctx.Err() != nil {
				return
			}
			r.log.Debug("udp read", "err", err)
		}
	}
}
