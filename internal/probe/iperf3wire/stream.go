package iperf3wire

import (
	"context"
	"encoding/binary"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// udpHeaderLen is the part of a datagram the receiver reads.
func udpHeaderLen(counters64 bool) int {
	if counters64 {
		return 16
	}
	return 12
}

// putUDPHeader writes the send time and sequence number as iperf_udp_send
// does.
func putUDPHeader(b []byte, now time.Time, seq uint64, counters64 bool) {
	us := now.UnixMicro()
	binary.BigEndian.PutUint32(b[0:4], uint32(us/1e6))
	binary.BigEndian.PutUint32(b[4:8], uint32(us%1e6))
	if counters64 {
		binary.BigEndian.PutUint64(b[8:16], seq)
	} else {
		binary.BigEndian.PutUint32(b[8:12], uint32(seq))
	}
}

// udpRecv accounts one stream's datagrams as iperf_udp_recv does: a gap in
// the sequence counts as lost, a late datagram takes one loss back, and
// jitter is RFC 1889's running estimate over the transit times.
type udpRecv struct {
	mu          sync.Mutex
	counters64  bool
	bytes       uint64
	datagrams   int64
	highest     int64 // highest sequence number seen (iperf3's packet_count)
	lost        int64
	outOfOrder  int64
	jitter      float64 // seconds
	prevTransit float64
}

func (u *udpRecv) add(pkt []byte, arrival time.Time) {
	if len(pkt) < udpHeaderLen(u.counters64) {
		return
	}
	sec := binary.BigEndian.Uint32(pkt[0:4])
	usec := binary.BigEndian.Uint32(pkt[4:8])
	var seq int64
	if u.counters64 {
		seq = int64(binary.BigEndian.Uint64(pkt[8:16]))
	} else {
		seq = int64(binary.BigEndian.Uint32(pkt[8:12]))
	}
	sent := float64(sec) + float64(usec)/1e6
	transit := float64(arrival.UnixNano())/1e9 - sent
	u.mu.Lock()
	defer u.mu.Unlock()
	first := u.bytes == 0
	u.bytes += uint64(len(pkt))
	u.datagrams++
	if seq >= u.highest+1 {
		if seq > u.highest+1 {
			u.lost += seq - 1 - u.highest
		}
		u.highest = seq
	} else {
		u.outOfOrder++
		if u.lost > 0 {
			u.lost--
		}
	}
	if first {
		u.prevTransit = transit
	}
	d := math.Abs(transit - u.prevTransit)
	u.prevTransit = transit
	u.jitter += (d - u.jitter) / 16
}

// resetOmit ends -O's omitted seconds as iperf_reset_stats does on the
// receiving side: the bytes received and the jitter start again from 0
// (the datagram and loss counts go on, as iperf3's do).
func (u *udpRecv) resetOmit() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.bytes = 0
	u.jitter = 0
}

// snapshot returns the stream's figures so far.
func (u *udpRecv) snapshot() udpRecv {
	u.mu.Lock()
	defer u.mu.Unlock()
	return udpRecv{bytes: u.bytes, datagrams: u.datagrams, highest: u.highest, lost: u.lost,
		outOfOrder: u.outOfOrder, jitter: u.jitter}
}

// pacer keeps a sender to a rate in bits per second (0: no limit).
type pacer struct {
	rate  uint64
	start time.Time
	sent  uint64 // bytes
	timer *time.Timer
}

func newPacer(rate uint64) *pacer { return &pacer{rate: rate, start: time.Now()} }

// wait blocks until n more bytes keep to the rate, or ctx ends.
func (p *pacer) wait(ctx context.Context, n int) error {
	if p.rate == 0 {
		p.sent += uint64(n)
		return ctx.Err()
	}
	due := p.start.Add(time.Duration(float64(p.sent) * 8 / float64(p.rate) * float64(time.Second)))
	p.sent += uint64(n)
	d := time.Until(due)
	if d <= 0 {
		return ctx.Err()
	}
	if p.timer == nil {
		p.timer = time.NewTimer(d)
	} else {
		p.timer.Reset(d)
	}
	select {
	case <-p.timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// sendTCP writes p.Len-byte blocks to conn at p.Bandwidth (0: as fast as
// it takes them), counting the bytes written, until ctx ends or a write
// fails.
func sendTCP(ctx context.Context, conn net.Conn, p Params, bytes *atomic.Uint64) {
	buf := make([]byte, p.Len)
	pc := newPacer(p.Bandwidth)
	for pc.wait(ctx, len(buf)) == nil {
		n, err := conn.Write(buf)
		bytes.Add(uint64(n))
		if err != nil {
			return
		}
	}
}

// recvTCP reads conn until a read fails (its deadline after TEST_END, or
// the close), counting the bytes read while running is set.
func recvTCP(conn net.Conn, p Params, bytes *atomic.Uint64, running *atomic.Bool) {
	buf := make([]byte, max(p.Len, 64<<10))
	for {
		n, err := conn.Read(buf)
		if running.Load() {
			bytes.Add(uint64(n))
		}
		if err != nil {
			return
		}
	}
}

// sendUDP writes p.Len-byte datagrams with iperf3's header through write at
// p.Bandwidth, counting the bytes and datagrams sent, until ctx ends or a
// write fails with an error final says ends the stream; any other failed
// write drops that datagram (a full socket buffer, as iperf3's would).
func sendUDP(ctx context.Context, p Params, bytes *atomic.Uint64, pkts *atomic.Int64, write func([]byte) (int, error), final func(error) bool) {
	buf := make([]byte, p.Len)
	pc := newPacer(p.Bandwidth)
	var seq uint64
	for pc.wait(ctx, len(buf)) == nil {
		seq++
		putUDPHeader(buf, time.Now(), seq, p.Counters64)
		n, err := write(buf)
		if err != nil {
			if final(err) {
				return
			}
			continue
		}
		bytes.Add(uint64(n))
		pkts.Add(1)
	}
}
