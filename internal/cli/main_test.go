package cli

import (
	"testing"

	"github.com/cnperf/cnperf/internal/cnperftest"
)

// TestMain removes the cnperf binary the tests built (kubectl_test.go
// runs it as a kubectl plugin).
func TestMain(m *testing.M) { cnperftest.Main(m) }
