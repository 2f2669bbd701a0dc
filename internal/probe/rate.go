package probe

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ParseRate reads a rate in bits per second as iperf3's -b does: a number
// with an optional k, M, G or T suffix (powers of 1000), e.g. "10M", "1.5G",
// "0". A trailing "bps" or "bit" is accepted.
func ParseRate(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	low := strings.ToLower(t)
	for _, suf := range []string{"bit/s", "bps", "bit"} {
		if strings.HasSuffix(low, suf) {
			t = t[:len(t)-len(suf)]
			break
		}
	}
	if t == "" {
		return 0, fmt.Errorf("rate %q: empty", s)
	}
	mult := 1.0
	switch t[len(t)-1] {
	case 'k', 'K':
		mult = 1e3
	case 'm', 'M':
		mult = 1e6
	case 'g', 'G':
		mult = 1e9
	case 't', 'T':
		mult = 1e12
	}
	if mult != 1 {
		t = t[:len(t)-1]
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("rate %q: want a number with an optional k, M, G suffix (bits per second)", s)
	}
	if v < 0 {
		return 0, fmt.Errorf("rate %q: must not be negative", s)
	}
	bps := v * mult
	if bps > 1e15 {
		return 0, fmt.Errorf("rate %q: too large", s)
	}
	return uint64(math.Round(bps)), nil
}

// FormatRate writes bits per second with an SI suffix, as iperf3 does
// ("9.41 Gbits/sec").
func FormatRate(bps float64) string {
	switch {
	case bps >= 1e9:
		return fmt.Sprintf("%.2f Gbits/sec", bps/1e9)
	case bps >= 1e6:
		return fmt.Sprintf("%.2f Mbits/sec", bps/1e6)
	case bps >= 1e3:
		return fmt.Sprintf("%.2f Kbits/sec", bps/1e3)
	}
	return fmt.Sprintf("%.0f bits/sec", bps)
}

// FormatBytes writes a byte count with a binary suffix, as iperf3 does
// ("1.10 GBytes").
func FormatBytes(b float64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.2f GBytes", b/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.2f MBytes", b/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.2f KBytes", b/(1<<10))
	}
	return fmt.Sprintf("%.0f Bytes", b)
}
