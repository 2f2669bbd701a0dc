package qosspec

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strings"
)

// ParseQuantity reads a Kubernetes resource quantity, as pod bandwidth
// annotations are written: a decimal number with an optional SI suffix
// (k, M, G, T, P, E: powers of 1000; m: milli) or binary suffix (Ki, Mi,
// Gi, Ti, Pi, Ei: powers of 1024), or an exponent ("1e6"). "10M" is
// 10 000 000. Like Kubernetes it rejects "K" (write "k" or "Ki").
func ParseQuantity(s string) (float64, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, errors.New("quantity: empty")
	}
	mult := 1.0
	num := t
	suffixes := []struct {
		suf string
		m   float64
	}{
		{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40}, {"Pi", 1 << 50}, {"Ei", 1 << 60},
		{"k", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}, {"P", 1e15}, {"E", 1e18}, {"m", 1e-3},
	}
	for _, x := range suffixes {
		if strings.HasSuffix(t, x.suf) {
			num, mult = strings.TrimSuffix(t, x.suf), x.m
			break
		}
	}
	if strings.HasSuffix(num, "K") {
		return 0, fmt.Errorf("quantity %q: Kubernetes writes kilo as \"k\" (or \"Ki\" for 1024)", s)
	}
	if num == "" || strings.ContainsAny(num, " _,") || strings.HasPrefix(num, "0x") {
		return 0, fmt.Errorf("quantity %q: want a number with an optional suffix (10M, 1G, 32Ki)", s)
	}
	f, ok := new(big.Float).SetString(num)
	if !ok {
		return 0, fmt.Errorf("quantity %q: want a number with an optional suffix (10M, 1G, 32Ki)", s)
	}
	v, _ := f.Float64()
	v *= mult
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("quantity %q: out of range", s)
	}
	if v < 0 {
		return 0, fmt.Errorf("quantity %q: must not be negative", s)
	}
	return v, nil
}

// MaxBandwidthBps is the highest pod bandwidth limit: 32 Gbit/s, the most
// kubelet accepts in a kubernetes.io/*-bandwidth annotation.
const MaxBandwidthBps = 32e9

// ParseBandwidth reads a pod bandwidth limit (a quantity in bits/s, as the
// kubernetes.io/ingress-bandwidth and egress-bandwidth annotations and the
// shaping suite's settings write it); it must be at least 1 kbit/s and at
// most MaxBandwidthBps. It is the one bandwidth parser of cnperf: the
// suites and the Kubernetes side both use it.
func ParseBandwidth(s string) (uint64, error) {
	v, err := ParseQuantity(s)
	if err != nil {
		return 0, err
	}
	if v == 0 {
		return 0, fmt.Errorf("bandwidth %q: rate 0 would stop all traffic; give a rate such as 10M", s)
	}
	if v < 1e3 || v > MaxBandwidthBps {
		return 0, fmt.Errorf("bandwidth %q: want 1k to 32G bits/s", s)
	}
	return uint64(v), nil
}
