package cli

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/cnperf/cnperf/internal/suite"
)

// suiteInfo is one suite as `cnperf suites --json` lists it.
type suiteInfo struct {
	Name     string      `json:"name"`
	Describe string      `json:"describe"`
	Keys     []suite.Key `json:"keys"`
}

func newSuitesCommand(st Streams) *cobra.Command {
	var out outputFlags
	cmd := &cobra.Command{
		Use:   "suites [SUITE]",
		Short: "List the suites and the --set keys each takes (unit, default, meaning)",
		Long: `List every suite cnperf runs (cnperf run SUITE, cnperf lab run SUITE)
with what it measures and each setting it takes as --set KEY=VALUE: the
value's unit, its default and its meaning. Name a suite to list only it.`,
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: completeSuiteNames,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(); err != nil {
				return err
			}
			names := suites().Names()
			if len(args) == 1 {
				if _, err := suites().Get(args[0]); err != nil {
					return err
				}
				names = args
			}
			var infos []suiteInfo
			for _, n := range names {
				s, _ := suites().Get(n)
				infos = append(infos, suiteInfo{Name: n, Describe: s.Describe(), Keys: suite.KeysOf(s)})
			}
			if ok, err := out.print(st.Out, infos); ok {
				return err
			}
			if out.format == "csv" || out.format == "markdown" {
				// One table: the suite, then its keys' columns.
				tw := out.table(st.Out)
				fmt.Fprintln(tw, "SUITE\tKEY\tUNIT\tDEFAULT\tMEANING")
				for _, in := range infos {
					for _, k := range in.Keys {
						fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", in.Name, k.Name, k.Unit, k.Default, k.Meaning)
					}
				}
				return tw.Flush()
			}
			for i, in := range infos {
				if i > 0 {
					fmt.Fprintln(st.Out)
				}
				fmt.Fprintf(st.Out, "%s: %s\n", in.Name, in.Describe)
				writeKeys(st.Out, in.Keys)
			}
			return nil
		},
	}
	out.register(cmd)
	cmd.Flags().Lookup("json").Usage = "print JSON: name, describe, keys[] with name, unit, default, meaning (-o json)"
	return cmd
}

// writeKeys writes a suite's settings as an indented table.
func writeKeys(w io.Writer, keys []suite.Key) {
	if len(keys) == 0 {
		fmt.Fprintln(w, "  (no settings)")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  --set KEY\tUNIT\tDEFAULT\tMEANING")
	for _, k := range keys {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", k.Name, k.Unit, k.Default, k.Meaning)
	}
	tw.Flush()
}

// suiteCommandHelp gives `cnperf run` and `cnperf lab run` a help that,
// when a suite is named (cnperf lab run shaping --help), ends with that
// suite's settings.
func suiteCommandHelp(cmd *cobra.Command) {
	def := cmd.HelpFunc()
	cmd.SetHelpFunc(func(c *cobra.Command, args []string) {
		def(c, args)
		for _, a := range c.Flags().Args() {
			s, err := suites().Get(a)
			if err != nil {
				continue
			}
			fmt.Fprintf(c.OutOrStdout(), "\nSettings of %s (--set KEY=VALUE, repeatable):\n", a)
			writeKeys(c.OutOrStdout(), suite.KeysOf(s))
			return
		}
	})
	cmd.ValidArgsFunction = completeSuiteNames
	_ = cmd.RegisterFlagCompletionFunc("set", completeSetKeys)
}

// completeSuiteNames completes the SUITE argument.
func completeSuiteNames(_ *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []string
	for _, n := range suites().Names() {
		if strings.HasPrefix(n, toComplete) {
			s, _ := suites().Get(n)
			out = append(out, n+"\t"+s.Describe())
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// completeSetKeys completes --set with the named suite's keys ("KEY=").
func completeSetKeys(_ *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) == 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	s, err := suites().Get(args[0])
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []string
	for _, k := range suite.KeysOf(s) {
		if strings.HasPrefix(k.Name+"=", toComplete) || strings.HasPrefix(k.Name, toComplete) {
			out = append(out, k.Name+"=\t"+k.Meaning)
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
}
