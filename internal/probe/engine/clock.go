package engine

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
)

// BootID identifies the running kernel; two processes with the same boot id
// read the same CLOCK_REALTIME, so one-way delays between them are exact.
// It returns "" when the id cannot be read.
func BootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return string(bytes.TrimSpace(b))
}

// TimeSample is one exchange of timestamps on a control connection: the
// client sent at T1, the responder read its clock at T2, the client got the
// answer at T3 (all ns since the epoch; T2 on the responder's clock).
type TimeSample struct{ T1, T2, T3 int64 }

// EstimateClock turns time exchanges into a clock estimate, using the
// exchange with the smallest round trip (the NTP idea): offset =
// T2 - (T1+T3)/2, error bound = (T3-T1)/2. sameClock short-cuts to an exact
// zero offset.
func EstimateClock(samples []TimeSample, sameClock bool) (probe.ClockInfo, error) {
	if sameClock {
		return probe.ClockInfo{SameClock: true}, nil
	}
	if len(samples) == 0 {
		return probe.ClockInfo{}, fmt.Errorf("estimate clock offset: no time samples")
	}
	best := samples[0]
	for _, s := range samples[1:] {
		if s.T3-s.T1 < best.T3-best.T1 {
			best = s
		}
	}
	rtt := best.T3 - best.T1
	if rtt < 0 {
		return probe.ClockInfo{}, fmt.Errorf("estimate clock offset: negative round trip %d ns", rtt)
	}
	offset := float64(best.T2) - float64(best.T1+best.T3)/2
	return probe.ClockInfo{OffsetMs: offset / 1e6, ErrorBoundMs: float64(rtt) / 2 / 1e6}, nil
}

// SyncClock exchanges n time messages on ctrl and estimates the responder's
// clock against this host's.
func SyncClock(ctx context.Context, ctrl *ControlConn, n int) (probe.ClockInfo, error) {
	samples := make([]TimeSample, 0, n)
	sameClock := false
	for i := 0; i < n; i++ {
		t1 := time.Now().UnixNano()
		if err := ctrl.Send(ctx, Message{Type: MsgTime, T1: t1}); err != nil {
			return probe.ClockInfo{}, fmt.Errorf("clock sync: %w", err)
		}
		m, err := ctrl.Expect(ctx, MsgTime)
		if err != nil {
			return probe.ClockInfo{}, fmt.Errorf("clock sync: %w", err)
		}
		t3 := time.Now().UnixNano()
		samples = append(samples, TimeSample{T1: t1, T2: m.T2, T3: t3})
		sameClock = m.BootID != "" && m.BootID == BootID()
	}
	return EstimateClock(samples, sameClock)
}
