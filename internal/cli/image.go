package cli

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/cnperf/cnperf/internal/image"
)

func newImageCommand(st Streams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "image",
		Short: "Container images of cnperf without Docker or a registry",
	}
	var o image.Options
	var out string
	build := &cobra.Command{
		Use:   "build -o FILE",
		Short: "Write an image of the cnperf binary alone as a docker-save or OCI tarball",
		Long: "Writes an image holding only the static cnperf binary (its own probes, no iperf) as a\n" +
			"`docker save` tarball or an OCI image layout in a tar, offline. Import it into a node's\n" +
			"containerd with `ctr -n k8s.io images import FILE` and deploy with\n" +
			"`cnperf k8s deploy --image TAG --image-pull-policy Never`.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return fmt.Errorf("-o FILE: say where to write the image")
			}
			if o.Binary == "" {
				exe, err := os.Executable()
				if err != nil {
					return fmt.Errorf("find the running cnperf binary: %w (pass --binary)", err)
				}
				o.Binary = exe
			}
			if err := image.Write(out, o); err != nil {
				return err
			}
			fmt.Fprintf(st.Out, "wrote %s image %s to %s\n", o.Format, o.Tag, out)
			return nil
		},
	}
	build.Flags().StringVarP(&out, "output", "o", "", "file to write")
	build.Flags().StringVar(&o.Tag, "tag", image.DefaultTag, "image name and tag")
	build.Flags().StringVar(&o.Format, "format", image.FormatDocker, "docker (docker save) or oci (OCI layout tar)")
	build.Flags().StringVar(&o.Binary, "binary", "", "static cnperf binary to put in (default: this one)")
	cmd.AddCommand(build)
	return cmd
}
