package cli

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
)

// byteSize is the value of a byte-count flag (--size, --window): a number
// of bytes, or as iperf3's -l and -w take it, a number with a K, M or G
// suffix in either case, counted in powers of 1024 ("128K" is 131072).
type byteSize struct{ n *int }

// byteSizeVarP defines a byte-count flag that takes iperf3's suffixes.
func byteSizeVarP(fl *pflag.FlagSet, p *int, name, shorthand string, def int, usage string) {
	*p = def
	fl.VarP(byteSize{p}, name, shorthand, usage)
}

// Set implements pflag.Value.
func (v byteSize) Set(s string) error {
	n, err := parseByteSize(s)
	if err != nil {
		return err
	}
	*v.n = n
	return nil
}

// String implements pflag.Value.
func (v byteSize) String() string {
	if v.n == nil {
		return "0"
	}
	return strconv.Itoa(*v.n)
}

// Type implements pflag.Value; --help shows it as "bytes".
func (byteSize) Type() string { return "bytes" }

// parseByteSize reads a byte count: digits with an optional K, M or G
// (binary multiples, as iperf3's -l and -w). Fractions and negative counts
// are refused; the engines say which sizes they take.
func parseByteSize(s string) (int, error) {
	num, mult := s, int64(1)
	if k := len(s); k > 0 {
		switch strings.ToUpper(s[k-1:]) {
		case "K":
			num, mult = s[:k-1], 1<<10
		case "M":
			num, mult = s[:k-1], 1<<20
		case "G":
			num, mult = s[:k-1], 1<<30
		}
	}
	v, err := strconv.ParseInt(num, 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("%q: want a byte count like 1400, 128K or 4M (K, M, G are 1024, 1024², 1024³ as in iperf3)", s)
	}
	if v > math.MaxInt32/mult {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return int(v * mult), nil
}
