package external

import (
	"regexp"
	"strings"
	"testing"
)

// TestIsHostname: the label check accepts and refuses what the regular
// expression it replaced did (compiled here, in the test, not in every
// cnperf process's init).
func TestIsHostname(t *testing.T) {
	re := regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]{0,62})(\.[A-Za-z0-9]([A-Za-z0-9-]{0,62}))*\.?$`)
	long := strings.Repeat("a", 63)
	for _, h := range []string{
		"a", "example.com", "example.com.", "a-b.c-", "x1.y2.z3", long, long + "a", long + ".b", "-a", "a.-b",
		"a..b", ".", "..", "a.", "a..", ".a", "a b", "a_b", "ä.com", "1.2.3.4", "a.b.c.d.e.f", "", "a/b", "a:80",
	} {
		if got, want := isHostname(h), re.MatchString(h); got != want {
			t.Errorf("isHostname(%q) = %v, the regular expression says %v", h, got, want)
		}
	}
}
