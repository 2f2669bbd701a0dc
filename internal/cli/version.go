package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cnperf/cnperf/internal/image"
)

// buildInfo is what `cnperf version` and `cnperf --version` print.
type buildInfo struct {
	Version   string `json:"version"`  // the module version ("(devel)" for a build from a checkout)
	Commit    string `json:"commit"`   // vcs.revision (or make build's), "unknown" when the build recorded none
	Modified  bool   `json:"modified"` // the checkout had uncommitted changes
	GoVersion string `json:"go_version"`
}

// fallbackCommit is the commit `make build` passes with -ldflags -X
// ("HASH" or "HASH+modified"), used when the go command recorded none.
var fallbackCommit string

// version is the release tag (e.g. v0.2.0) that `make build` (when a tag
// is at HEAD) and the release build (.goreleaser.yaml) pass with -ldflags
// -X; empty in any other build.
var version string

// readBuildInfo reads the version, commit and Go version the running
// binary was built with.
func readBuildInfo() buildInfo {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	return withVersion(withFallback(fromBuildInfo(bi), fallbackCommit), version)
}

// withVersion sets the version stamped at link time, when there is one:
// go build from a checkout records only "(devel)".
func withVersion(b buildInfo, stamped string) buildInfo {
	if stamped != "" {
		b.Version = stamped
	}
	return b
}

// withFallback fills in the commit from fallback when the build
// information has none.
func withFallback(b buildInfo, fallback string) buildInfo {
	if b.Commit != "unknown" || fallback == "" {
		return b
	}
	b.Commit, b.Modified = strings.CutSuffix(fallback, "+modified")
	return b
}

// fromBuildInfo reads what the go command stamped into a binary (nil: no
// build information). The commit is there only when the binary was built
// from a git checkout with VCS stamping on (go build's -buildvcs, on by
// default; go run and tests do not stamp it).
func fromBuildInfo(bi *debug.BuildInfo) buildInfo {
	b := buildInfo{Version: "dev", Commit: "unknown", GoVersion: runtime.Version()}
	if bi == nil {
		return b
	}
	if bi.Main.Version != "" {
		b.Version = bi.Main.Version
	}
	if bi.GoVersion != "" {
		b.GoVersion = bi.GoVersion
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Commit = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
	return b
}

// String is the one line `cnperf version` prints.
func (b buildInfo) String() string {
	commit := b.Commit
	if b.Modified {
		commit += " (modified)"
	}
	return fmt.Sprintf("cnperf %s, commit %s, %s", b.Version, commit, b.GoVersion)
}

// buildVersion returns the module version the binary was built from.
func buildVersion() string { return readBuildInfo().Version }

// defaultImage is the image of this binary's own release, which `cnperf k8s
// deploy` uses unless told otherwise; a development build has none.
func defaultImage() (string, error) { return image.ForVersion(buildVersion()) }

func newVersionCommand(st Streams) *cobra.Command {
	var out outputFlags
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print cnperf's version, commit and Go version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(); err != nil {
				return err
			}
			b := readBuildInfo()
			if ok, err := out.printData(st.Out, b); ok {
				return err
			}
			_, err := fmt.Fprintln(st.Out, b)
			return err
		},
	}
	out.register(cmd)
	return cmd
}
