package probe

import (
	"fmt"
	"strconv"
	"strings"
)

// dscpNames maps the standard per-hop-behaviour names to code points
// (RFC 2474, 2597, 3246, 5865).
var dscpNames = map[string]int{
	"BE": 0, "DF": 0, "CS0": 0,
	"CS1": 8, "CS2": 16, "CS3": 24, "CS4": 32, "CS5": 40, "CS6": 48, "CS7": 56,
	"AF11": 10, "AF12": 12, "AF13": 14,
	"AF21": 18, "AF22": 20, "AF23": 22,
	"AF31": 26, "AF32": 28, "AF33": 30,
	"AF41": 34, "AF42": 36, "AF43": 38,
	"EF": 46, "VOICE-ADMIT": 44, "LE": 1,
}

// ParseDSCP reads a DSCP given as a name (EF, AF41, CS1) or a number 0-63
// (decimal, or hex with 0x).
func ParseDSCP(s string) (int, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	if t == "" {
		return 0, fmt.Errorf("dscp: empty value")
	}
	if v, ok := dscpNames[t]; ok {
		return v, nil
	}
	v, err := strconv.ParseInt(t, 0, 16)
	if err != nil {
		return 0, fmt.Errorf("dscp %q: not a known name (EF, AF11-AF43, CS0-CS7, BE, LE) or a number 0-63", s)
	}
	if v < 0 || v > 63 {
		return 0, fmt.Errorf("dscp %q: must be 0-63", s)
	}
	return int(v), nil
}

// ParseTOS reads a TOS byte given as a number (0x10, 16) in 0-255.
func ParseTOS(s string) (int, error) {
	t := strings.TrimSpace(s)
	v, err := strconv.ParseInt(t, 0, 16)
	if err != nil {
		return 0, fmt.Errorf("tos %q: want a byte such as 0x10 or 16", s)
	}
	if v < 0 || v > 255 {
		return 0, fmt.Errorf("tos %q: must be 0-255", s)
	}
	return int(v), nil
}

// DSCPName returns the standard name of a code point, or its number.
func DSCPName(dscp int) string {
	best := ""
	for name, v := range dscpNames {
		if v != dscp {
			continue
		}
		// Prefer the conventional spelling: EF, AFxy, CSx, then the rest.
		if best == "" || rankName(name) < rankName(best) || (rankName(name) == rankName(best) && name < best) {
			best = name
		}
	}
	if best == "" {
		return strconv.Itoa(dscp)
	}
	return best
}

func rankName(n string) int {
	switch {
	case n == "EF":
		return 0
	case strings.HasPrefix(n, "AF"):
		return 1
	case strings.HasPrefix(n, "CS") && n != "CS0":
		return 2
	case n == "BE":
		return 3
	}
	return 4
}
