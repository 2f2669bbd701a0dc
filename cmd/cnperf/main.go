// Command cnperf measures container networks: probes, responder, server,
// agent, lab and reports in one binary. See README.md.
package main

import (
	"os"

	"github.com/cnperf/cnperf/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], cli.StdStreams()))
}
