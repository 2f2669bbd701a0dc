package k8s

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/validation"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	manifests "github.com/cnperf/cnperf/deploy/kubernetes"
)

// DeployOptions change the base manifests the way the overlays in
// deploy/kubernetes/overlays do, without needing kustomize.
type DeployOptions struct {
	Image           string            // e.g. localhost/cnperf:dev; empty keeps the base's
	ImagePullPolicy corev1.PullPolicy // empty keeps the default
	// ImagePullSecret names a Secret of type kubernetes.io/dockerconfigjson
	// in the namespace that the pods pull the image with: it goes on the
	// ServiceAccounts (so test pods get it too) and the pod templates.
	ImagePullSecret string
	// PullSecretConfig, when set, is the .dockerconfigjson Deploy writes
	// into ImagePullSecret (created or replaced); otherwise that Secret
	// must exist.
	PullSecretConfig []byte
	NodePort         int32  // > 0: the server's Service becomes a NodePort on this port
	PostgresSecret   string // Secret with key "dsn": the server uses PostgreSQL, no PVC
	// ServerArgs are appended to the server's arguments (e.g. log level).
	ServerArgs []string
	// TLS: the server answers HTTPS only, with the certificate in
	// ServingSecret, and agents verify it with the CA in CABundle, as the
	// base does; Deploy makes both. Without it the server serves plain
	// HTTP (overlays/plain-http).
	TLS bool
	// HostAgents adds the host-network agent DaemonSet (components/host-agents)
	// and QoSAgents gives every agent NET_ADMIN and NET_RAW as uid 0
	// (components/qos-agents); either relabels the namespace Pod Security
	// privileged. Without them every pod runs under restricted.
	HostAgents, QoSAgents bool
}

// The Pod Security levels the namespace is labelled with.
const (
	LevelRestricted = "restricted"
	LevelPrivileged = "privileged"
)

// Level is the Pod Security level the options need.
func (o DeployOptions) Level() string {
	if o.HostAgents || o.QoSAgents {
		return LevelPrivileged
	}
	return LevelRestricted
}

// Validate checks the options.
func (o DeployOptions) Validate() error {
	var errs []error
	switch o.ImagePullPolicy {
	case "", corev1.PullAlways, corev1.PullNever, corev1.PullIfNotPresent:
	default:
		errs = append(errs, fmt.Errorf("image pull policy %q: must be Always, Never or IfNotPresent", o.ImagePullPolicy))
	}
	if o.NodePort != 0 && (o.NodePort < 30000 || o.NodePort > 32767) {
		errs = append(errs, fmt.Errorf("node port %d: must be in the default NodePort range 30000-32767", o.NodePort))
	}
	if o.PostgresSecret != "" {
		for _, msg := range validation.IsDNS1123Subdomain(o.PostgresSecret) {
			errs = append(errs, fmt.Errorf("postgres secret %q: %s", o.PostgresSecret, msg))
		}
	}
	if o.ImagePullSecret != "" {
		for _, msg := range validation.IsDNS1123Subdomain(o.ImagePullSecret) {
			errs = append(errs, fmt.Errorf("image pull secret %q: %s", o.ImagePullSecret, msg))
		}
	} else if o.PullSecretConfig != nil {
		errs = append(errs, errors.New("image pull secret: the credentials need a Secret name"))
	}
	if strings.ContainsAny(o.Image, " \t\n") {
		errs = append(errs, fmt.Errorf("image %q: must not contain white space", o.Image))
	}
	return errors.Join(errs...)
}

// kustomization is the part of kustomization.yaml the base uses.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
	Images     []struct {
		Name    string `json:"name"`
		NewName string `json:"newName,omitempty"`
		NewTag  string `json:"newTag,omitempty"`
	} `json:"images"`
}

// BaseDocuments returns the base's YAML documents in the order its
// kustomization.yaml lists the files, each with the file it came from.
func BaseDocuments() ([]Document, error) {
	return documents(manifests.Files, manifests.Base)
}

// Document is one YAML document of a manifest file.
type Document struct {
	File string
	YAML []byte
}

func documents(fsys fs.FS, dir string) ([]Document, error) {
	raw, err := fs.ReadFile(fsys, path.Join(dir, "kustomization.yaml"))
	if err != nil {
		return nil, fmt.Errorf("read %s/kustomization.yaml: %w", dir, err)
	}
	var k kustomization
	if err := yaml.UnmarshalStrict(raw, &k); err != nil {
		return nil, fmt.Errorf("%s/kustomization.yaml: %w", dir, err)
	}
	var out []Document
	for _, r := range k.Resources {
		file := path.Join(dir, r)
		b, err := fs.ReadFile(fsys, file)
		if err != nil {
			return nil, fmt.Errorf("kustomization lists %s: %w", r, err)
		}
		rd := utilyaml.NewYAMLReader(bufioReader(b))
		for {
			doc, err := rd.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("%s: %w", file, err)
			}
			if len(bytes.TrimSpace(stripComments(doc))) == 0 {
				continue
			}
			out = append(out, Document{File: file, YAML: doc})
		}
	}
	return out, nil
}

// strictDecoder decodes with the client-go scheme and rejects unknown and
// duplicate fields.
var strictCodecs = serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict)

// DecodeStrict decodes one manifest document into its typed object.
func DecodeStrict(doc Document) (runtime.Object, error) {
	obj, _, err := strictCodecs.UniversalDeserializer().Decode(doc.YAML, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", doc.File, err)
	}
	return obj, nil
}

// Render returns the objects to apply, typed and checked, with opts
// applied, in apply order (namespace first).
func Render(opts DeployOptions) ([]runtime.Object, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	docs, err := BaseDocuments()
	if err != nil {
		return nil, err
	}
	var out []runtime.Object
	for _, d := range docs {
		obj, err := DecodeStrict(d)
		if err != nil {
			return nil, err
		}
		if opts.PostgresSecret != "" {
			if pvc, ok := obj.(*corev1.PersistentVolumeClaim); ok && pvc.Name == "cnperf-data" {
				continue
			}
		}
		if err := customize(obj, opts); err != nil {
			return nil, fmt.Errorf("%s: %w", d.File, err)
		}
		out = append(out, obj)
	}
	if opts.HostAgents {
		host, err := overlayObject(hostAgentFile)
		if err != nil {
			return nil, err
		}
		if err := customize(host, opts); err != nil {
			return nil, fmt.Errorf("%s: %w", hostAgentFile, err)
		}
		out = append(out, host)
	}
	if opts.PostgresSecret != "" {
		// Server replicas on PostgreSQL keep one up through voluntary
		// disruptions: the overlay's own PodDisruptionBudget.
		pdb, err := overlayObject(postgresPDB)
		if err != nil {
			return nil, err
		}
		out = append(out, pdb)
	}
	return out, nil
}

// hostAgentFile is components/host-agents's DaemonSet, applied with
// HostAgents as kubectl applies it with the component.
const hostAgentFile = "components/host-agents/agent-host.yaml"

// postgresPDB is overlays/postgres's PodDisruptionBudget, applied with
// PostgresSecret as kubectl applies it with the overlay.
const postgresPDB = "overlays/postgres/server-pdb.yaml"

// overlayObject decodes an overlay's file holding one whole object.
func overlayObject(file string) (runtime.Object, error) {
	b, err := fs.ReadFile(manifests.Files, file)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", file, err)
	}
	return DecodeStrict(Document{File: file, YAML: b})
}

// ToUnstructured converts a typed object for the dynamic client, with its
// apiVersion and kind set.
func ToUnstructured(obj runtime.Object) (*unstructured.Unstructured, error) {
	gvks, _, err := scheme.Scheme.ObjectKinds(obj)
	if err != nil || len(gvks) == 0 {
		return nil, fmt.Errorf("kind of %T: %w", obj, err)
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("convert %T: %w", obj, err)
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(gvks[0])
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	unstructured.RemoveNestedField(u.Object, "status")
	if tmpl, ok, _ := unstructured.NestedMap(u.Object, "spec", "template", "metadata"); ok {
		delete(tmpl, "creationTimestamp")
		_ = unstructured.SetNestedMap(u.Object, tmpl, "spec", "template", "metadata")
	}
	return u, nil
}

func stripComments(b []byte) []byte {
	var out [][]byte
	for _, l := range bytes.Split(b, []byte("\n")) {
		if t := bytes.TrimSpace(l); len(t) > 0 && t[0] != '#' && !bytes.Equal(t, []byte("---")) {
			out = append(out, l)
		}
	}
	return bytes.Join(out, []byte("\n"))
}
