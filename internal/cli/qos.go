package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/cnperf/cnperf/internal/qos"
)

// newQoSCommand is `cnperf qos`: what the kernel's traffic control can do,
// and what is on a link.
func newQoSCommand(st Streams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "qos",
		Short: "Traffic control: which qdiscs, classifiers and actions the kernel has; what is on a link",
	}
	var out outputFlags
	detect := &cobra.Command{
		Use:   "detect [FEATURE...]",
		Short: "Try each qdisc, classifier and action on scratch devices and say which the kernel lacks",
		Long: `Try each qdisc (htb, tbf, prio, fq_codel, cake, netem, ...), classifier
(u32, flower, matchall) and action (mirred, police) on a veth in a scratch
network namespace, and print which the kernel has. Needs CAP_NET_ADMIN.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			f, err := qos.Detect(ctx, "", args...)
			if err != nil {
				return err
			}
			if ok, err := out.print(st.Out, f); ok {
				return err
			}
			tw := out.table(st.Out)
			fmt.Fprintln(tw, "FEATURE\tKIND\tPRESENT\tKERNEL SAID")
			for _, x := range f.List {
				fmt.Fprintf(tw, "%s\t%s\t%v\t%s\n", x.Name, x.Kind, x.Present, x.Err)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			_, err = fmt.Fprintln(out.prose(st), f.Summary())
			return err
		},
	}
	out.register(detect)
	var netns, link string
	var showJSON bool
	var showOut outputFlags
	show := &cobra.Command{
		Use:   "show --link DEV [--netns NS]",
		Short: "Show the qdiscs, classes (with counters) and filters on a link",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := showOut.check(); err != nil {
				return err
			}
			if showJSON && showOut.format != "" && showOut.format != "json" {
				return fmt.Errorf("--json and -o %s: give one", showOut.format)
			}
			s, err := qos.Show(qos.Target{NetNS: netns, Link: link})
			if err != nil {
				return err
			}
			if showJSON {
				showOut.format = "json"
			}
			if ok, err := showOut.printData(st.Out, s); ok {
				return err
			}
			_, err = fmt.Fprintln(st.Out, s.Config())
			return err
		},
	}
	show.Flags().StringVar(&link, "link", "", "interface name (required)")
	show.Flags().StringVar(&netns, "netns", "", "network namespace: a name under /var/run/netns or a path (default: this one)")
	show.Flags().BoolVar(&showJSON, "json", false, "print JSON with counters (-o json)")
	showOut.registerOutput(show)
	_ = show.MarkFlagRequired("link")
	cmd.AddCommand(detect, show)
	return cmd
}
