package udp

import (
	"github.com/cnperf/cnperf/internal/probe"
)

// Control messages of the udp engine beyond probe's: live interval reports
// from a receiving responder.
const msgInterval = "udp-interval"

// startData rides on the client's MsgStart.
type startData struct {
	// OffsetNs is the receiver-clock minus sender-clock offset to take off
	// each one-way delay (0 when both ends share a clock).
	OffsetNs int64 `json:"offset_ns"`
	// Latency is false when the clock could not be estimated: the receiver
	// then records no one-way delays.
	Latency bool `json:"latency"`
	// From is the address of the client's data socket as the client sees
	// it, for a forward test: the responder receives on a socket of the
	// session's own connected to it (ownSocket). Empty from an older
	// client.
	From string `json:"from,omitempty"`
}

// txReport is the sender's account of a test.
type txReport struct {
	Sent       int64   `json:"sent"`
	Bytes      int64   `json:"bytes"`
	DurationNs int64   `json:"duration_ns"`
	CPUPct     float64 `json:"cpu_pct"`
	// CPUUserPct and CPUSystemPct split CPUPct (nil from an older peer).
	CPUUserPct   *float64 `json:"cpu_user_pct,omitempty"`
	CPUSystemPct *float64 `json:"cpu_system_pct,omitempty"`
	Mode         string   `json:"mode"`
	// Burst is the most datagrams handed to the kernel in one call.
	Burst int      `json:"burst"`
	Notes []string `json:"notes,omitempty"`
}

// rxReport is the receiver's account of a test.
type rxReport struct {
	Received   int64 `json:"received"`
	OutOfOrder int64 `json:"out_of_order"`
	Duplicate  int64 `json:"duplicate"`
	// Stray counts datagrams of the session that were not probe data.
	Stray      int64            `json:"stray,omitempty"`
	Bytes      int64            `json:"bytes"`
	DurationNs int64            `json:"duration_ns"`
	JitterMs   float64          `json:"jitter_ms"`
	Latency    *probe.Summary   `json:"latency_ms,omitempty"`
	Histogram  *probe.Histogram `json:"histogram,omitempty"`
	TOS        *int             `json:"tos,omitempty"`
	// MixedTOS is set when datagrams arrived with different TOS bytes.
	MixedTOS bool    `json:"mixed_tos,omitempty"`
	CPUPct   float64 `json:"cpu_pct"`
	// CPUUserPct and CPUSystemPct split CPUPct (nil from an older peer).
	CPUUserPct   *float64         `json:"cpu_user_pct,omitempty"`
	CPUSystemPct *float64         `json:"cpu_system_pct,omitempty"`
	Drops        *int64           `json:"socket_drops,omitempty"`
	KernelTS     bool             `json:"kernel_ts"`
	Mode         string           `json:"mode"`
	Intervals    []probe.Interval `json:"intervals,omitempty"`
	Notes        []string         `json:"notes,omitempty"`
}

// cpuSplit returns the pointers a report carries for use.
func cpuSplit(use probe.CPUUse) (user, system *float64) {
	return probe.Float(use.UserPct), probe.Float(use.SystemPct)
}

// cpuUse returns a report's CPU split, nil when it had none.
func cpuUse(pct float64, user, system *float64) *probe.CPUUse {
	if user == nil || system == nil {
		return nil
	}
	return &probe.CPUUse{Pct: pct, UserPct: *user, SystemPct: *system}
}
