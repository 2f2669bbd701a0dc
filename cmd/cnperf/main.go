// Command cnperf measures container networks: probes, responder, server,
// agent, lab and reports in one binary. See README.md.
package main

import (
	"os"

	"github.com/cnperf/cnperf/internal/cli"
)

func main() {
	if cli.IsKubectlPlugin(os.Args[0]) { // run by kubectl as `kubectl cnperf`
		os.Exit(cli.KubectlMain(os.Args[1:], cli.StdStreams()))
	}
	os.Exit(cli.Main(os.Args[1:], cli.StdStreams()))
}
