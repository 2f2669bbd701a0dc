package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/cnperf/cnperf/internal/image"
	"github.com/cnperf/cnperf/internal/k8s"
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
	cmd.AddCommand(build, newImagePushCommand(st))
	return cmd
}

func newImagePushCommand(st Streams) *cobra.Command {
	var pf pushFlags
	cmd := &cobra.Command{
		Use:   "push REGISTRY/REPO[:TAG]",
		Short: "Push an image of cnperf (an index of linux/amd64, linux/arm64, ...) to a registry and print its digest",
		Long: "Builds the image `cnperf image build` writes, for every platform it has a binary for: the\n" +
			"running binary's (when it is a static Linux executable) and each --binary linux/ARCH=PATH\n" +
			"(e.g. the release archives' binaries), as one OCI image index; pushes it with the\n" +
			"credentials of the Docker config ($DOCKER_CONFIG or ~/.docker/config.json) and its\n" +
			"credential helpers (what docker login, aws ecr get-login-password, gcloud auth\n" +
			"configure-docker or az acr login set up); prints REGISTRY/REPO@sha256:... Without a\n" +
			"TAG the image is reachable by digest alone.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ref, err := pf.push(cmd.Context(), args[0], st.Err)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(st.Out, ref)
			return err
		},
	}
	pf.add(cmd.Flags())
	return cmd
}

// pushFlags are the flags of `cnperf image push` and `cnperf k8s deploy --push`.
type pushFlags struct {
	binaries []string
	insecure bool
	timeout  time.Duration
	exe      func() (string, error) // the running binary; os.Executable
}

func (p *pushFlags) add(fs *pflag.FlagSet) {
	fs.StringArrayVar(&p.binaries, "binary", nil, "also put in this static cnperf for a platform: linux/ARCH=PATH (repeatable; e.g. --binary linux/arm64=cnperf-arm64)")
	fs.BoolVar(&p.insecure, "insecure-registry", false, "the registry speaks plain HTTP or has a certificate this machine does not trust (a lab registry)")
	fs.DurationVar(&p.timeout, "push-timeout", 10*time.Minute, "bound on the whole push")
}

// push builds the index of the binaries at hand, pushes it to dst and
// returns the reference by digest; log says which platforms it holds.
func (p *pushFlags) push(ctx context.Context, dst string, log io.Writer) (name.Digest, error) {
	po := image.PushOptions{Insecure: p.insecure}
	if _, err := image.ParseDestination(dst, po); err != nil {
		return name.Digest{}, err
	}
	bins, err := p.collect()
	if err != nil {
		return name.Digest{}, err
	}
	idx, err := image.Index(bins, image.Options{})
	if err != nil {
		return name.Digest{}, err
	}
	var plats []string
	for _, b := range bins {
		plats = append(plats, "linux/"+b.Arch)
	}
	if len(bins) == 1 {
		fmt.Fprintf(log, "image for %s only (no --binary for other platforms): nodes of other architectures cannot run it\n", plats[0])
	}
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	ref, err := image.Push(ctx, dst, idx, po)
	if err != nil {
		return name.Digest{}, err
	}
	fmt.Fprintf(log, "pushed %s (%s)\n", ref, strings.Join(plats, ", "))
	return ref, nil
}

// collect returns the --binary binaries plus the running one for its own
// platform, unless a --binary already gives that platform.
func (p *pushFlags) collect() ([]image.Binary, error) {
	var bins []image.Binary
	for _, s := range p.binaries {
		b, err := image.ParseBinary(s)
		if err != nil {
			return nil, err
		}
		bins = append(bins, b)
	}
	exeOf := p.exe
	if exeOf == nil {
		exeOf = os.Executable
	}
	exe, err := exeOf()
	if err == nil {
		var arch string
		if arch, err = image.ArchOf(exe); err == nil {
			if !slices.ContainsFunc(bins, func(b image.Binary) bool { return b.Arch == arch }) {
				bins = append(bins, image.Binary{Arch: arch, Path: exe})
			}
		}
	}
	if len(bins) == 0 {
		return nil, fmt.Errorf("the running cnperf cannot go into a Linux image (%w): pass --binary linux/ARCH=PATH with a static Linux build", err)
	}
	return bins, nil
}

// deployImage is how `cnperf k8s deploy` picks its image.
type deployImage struct {
	push         string // --push REGISTRY/REPO[:TAG]
	createSecret bool   // --create-image-pull-secret
	pf           pushFlags
	version      string // this binary's; buildVersion() when empty
}

// check refuses contradictory flags before anything is built or pushed.
func (d *deployImage) check(o k8s.DeployOptions) error {
	if d.push != "" && o.Image != "" {
		return errors.New("--push and --image: give one (--push deploys the image it pushes)")
	}
	if d.createSecret && o.ImagePullSecret == "" {
		return errors.New("--create-image-pull-secret: name the Secret with --image-pull-secret NAME")
	}
	if d.push != "" {
		_, err := image.ParseDestination(d.push, image.PushOptions{Insecure: d.pf.insecure})
		return err
	}
	return nil
}

// resolve sets o.Image (pushed and by digest, given, or this release's)
// and, when asked, the pull Secret's credentials.
func (d *deployImage) resolve(ctx context.Context, o *k8s.DeployOptions, log io.Writer) error {
	switch {
	case d.push != "":
		ref, err := d.pf.push(ctx, d.push, log)
		if err != nil {
			return err
		}
		o.Image = ref.String()
	case o.Image == "":
		v := d.version
		if v == "" {
			v = buildVersion()
		}
		img, err := image.ForVersion(v)
		if err != nil {
			return fmt.Errorf("%w: pass --push REGISTRY/REPO to push this binary's image, or --image REF", err)
		}
		o.Image = img
	}
	if d.createSecret {
		ref, err := name.ParseReference(o.Image, name.StrictValidation)
		if err != nil {
			return fmt.Errorf("image %q: %w", o.Image, err)
		}
		cfg, err := image.DockerConfigJSON(ref, nil)
		if err != nil {
			return fmt.Errorf("--create-image-pull-secret: %w", err)
		}
		o.PullSecretConfig = cfg
	}
	return nil
}
