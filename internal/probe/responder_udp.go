package probe

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/cnperf/cnperf/internal/probe/udpio"
)

// udpBufferBytes is the responder's UDP socket buffer: large, so that a
// burst at tens of Gbit/s is not lost in this host's socket before the
// reader gets to it (loss should measure the path, not the responder).
const udpBufferBytes = 32 << 20

// readUDP is the responder's UDP reader: it receives in batches (recvmmsg,
// UDP GRO where the kernel has it) and demultiplexes datagrams to their
// sessions' PacketFuncs by the session id in the packet header.
func (r *Responder) readUDP(ctx context.Context) {
	rd, err := udpio.NewReader(r.udp, 8)
	if err != nil {
		r.log.Error("udp reader", "err", err)
		return
	}
	r.gro.Store(rd.GRO)
	r.log.Debug("udp reader", "gro", rd.GRO)
	var lastID SessionID
	var lastFn PacketFunc
	var rx RxInfo
	for ctx.Err() == nil {
		err := rd.Read(func(pkt []byte, m udpio.Meta) {
			if m.Seg == 0 {
				rx = parseRx(m.OOB)
				rx.RecvNs = time.Now().UnixNano()
			}
			h, ok := ParsePacketHeader(pkt)
			if !ok {
				return
			}
			fn := lastFn
			if fn == nil || h.Session != lastID {
				v, ok := r.packetFns.Load(h.Session)
				if !ok {
					return
				}
				fn, lastID, lastFn = v.(PacketFunc), h.Session, v.(PacketFunc)
			}
			fn(pkt, m.From, rx)
		})
		// A session that ended must not keep receiving through the cache.
		lastFn = nil
		if err != nil {
			if errors.Is(err, net.ErrClosed) || ctx.Err() != nil {
				return
			}
			r.log.Debug("udp read", "err", err)
		}
	}
}
