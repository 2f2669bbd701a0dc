package cli

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"
)

// outputFlags are kubectl's -o/--output for a verb that prints: json and
// yaml print the verb's data, wide its table with the extra columns it has
// (the same table where it has none, as kubectl does), and "" or table the
// table. --json, the older spelling, stays as -o json.
type outputFlags struct {
	format string
	asJSON bool
}

// outputFormats are the -o values every printing verb takes.
var outputFormats = []string{"table", "wide", "json", "yaml"}

func (o *outputFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVarP(&o.format, "output", "o", "", "output format: "+strings.Join(outputFormats, ", ")+" (default table)")
	fl.BoolVar(&o.asJSON, "json", false, "print JSON (-o json)")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(outputFormats, cobra.ShellCompDirectiveNoFileComp))
}

// check validates the flags before anything is asked of a server.
func (o *outputFlags) check() error {
	if o.format != "" && !slices.Contains(outputFormats, o.format) {
		return fmt.Errorf("-o %q: want one of %s", o.format, strings.Join(outputFormats, ", "))
	}
	if o.asJSON && o.format != "" && o.format != "json" {
		return fmt.Errorf("--json and -o %s: give one", o.format)
	}
	return nil
}

// structured reports whether the data is printed as data (json, yaml)
// rather than as a table.
func (o *outputFlags) structured() bool {
	return o.asJSON || o.format == "json" || o.format == "yaml"
}

// wide reports whether a table should show its extra columns.
func (o *outputFlags) wide() bool { return o.format == "wide" }

// print writes v as JSON or YAML when that was asked for and reports
// whether it did; the caller prints its table otherwise.
func (o *outputFlags) print(w io.Writer, v any) (bool, error) {
	switch {
	case o.format == "yaml":
		b, err := yaml.Marshal(v)
		if err != nil {
			return true, fmt.Errorf("-o yaml: %w", err)
		}
		_, err = w.Write(b)
		return true, err
	case o.structured():
		return true, printJSON(w, v)
	}
	return false, nil
}
