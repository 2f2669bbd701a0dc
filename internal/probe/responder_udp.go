package probe

import (
	"context"
	"errors"
	"net"
)

// readUDP is the responder's UDP reader: it demultiplexes datagrams to their
// sessions' PacketFuncs by the session id in the packet header.
func (r *Responder) readUDP(ctx context.Context) {
	buf := make([]byte, 64<<10)
	oob := make([]byte, 256)
	for ctx.Err() == nil {
		n, oobn, _, from, err := r.udp.ReadMsgUDPAddrPort(buf, oob)
		if err != nil {
			if errors.Is(err, net.ErrClosed) || ctx.Err() != nil {
				return
			}
			continue
		}
		h, ok := ParsePacketHeader(buf[:n])
		if !ok {
			continue
		}
		fn, ok := r.packetFns.Load(h.Session)
		if !ok {
			continue
		}
		var rx RxInfo
		rx.TOS, rx.TOSOK, rx.KernelNs, _ = ParseTOSCmsgs(oob[:oobn])
		fn.(PacketFunc)(buf[:n], from, rx)
	}
}
