package k8s

import (
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// The TLS material `cnperf k8s deploy` keeps in the namespace (what the
// kustomize base and the Helm chart mount; `cnperf k8s certs` or the chart
// makes it):
//
//   - CASecret: the CA's certificate and private key (ca.crt, ca.key). No
//     pod mounts it; only `cnperf k8s deploy` reads it, to sign serving
//     certificates with the same CA on every re-deploy.
//   - CABundle: a ConfigMap with the CA certificate alone (ca.crt): what
//     agents mount for --ca-file and what the CLI outside the cluster
//     reads through the API server to verify the server.
//   - ServingSecret: the server's certificate and key (kubernetes.io/tls:
//     tls.crt, tls.key), which only the server mounts.
const (
	CASecret      = "cnperf-ca"
	CABundle      = "cnperf-ca-bundle"
	ServingSecret = "cnperf-server-tls"
	// CABundleKey is the key of the CA certificate in CABundle.
	CABundleKey = "ca.crt"

	// Pod template annotations that carry the hashes of the serving
	// certificate (server) and of the CA (agents): a rotated certificate
	// changes the template, so the workloads roll and read it anew.
	ServingCertAnnotation = "cnperf.io/serving-cert-sha256"
	CAAnnotation          = "cnperf.io/ca-sha256"
)

// ServerDNSNames are the names of the server's Service in namespace ns
// that clients in the cluster use: short, namespaced, .svc and the
// cluster domain's.
func ServerDNSNames(ns string) []string {
	return []string{ServerName, ServerName + "." + ns, ServerName + "." + ns + ".svc", ServerName + "." + ns + ".svc.cluster.local"}
}

// customizePlain makes the server serve plain HTTP and the agents (every
// DaemonSet) reach it so, as overlays/plain-http does: the base serves
// HTTPS only.
func customizePlain(obj any) {
	switch x := obj.(type) {
	case *appsv1.Deployment:
		if x.Name != ServerName {
			return
		}
		ps := &x.Spec.Template.Spec
		c := &ps.Containers[0]
		c.Args = dropArgs(c.Args, "--tls-cert", "--tls-key")
		for _, p := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
			if p != nil && p.HTTPGet != nil {
				p.HTTPGet.Scheme = ""
			}
		}
		c.VolumeMounts = slices.DeleteFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == serverTLSVolume })
		ps.Volumes = slices.DeleteFunc(ps.Volumes, func(v corev1.Volume) bool { return v.Name == serverTLSVolume })
	case *appsv1.DaemonSet:
		ps := &x.Spec.Template.Spec
		c := &ps.Containers[0]
		c.Args = dropArgs(c.Args, "--ca-file", "--tls-server-name")
		for i, a := range c.Args {
			if rest, ok := strings.CutPrefix(a, "https://$(CNPERF_SERVER_SERVICE_HOST)"); ok {
				c.Args[i] = "http://$(CNPERF_SERVER_SERVICE_HOST)" + rest
			}
		}
		c.VolumeMounts = slices.DeleteFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == caVolume })
		ps.Volumes = slices.DeleteFunc(ps.Volumes, func(v corev1.Volume) bool { return v.Name == caVolume })
	}
}

// The names of the server's serving-certificate volume and of the agents'
// CA bundle volume in the base.
const (
	serverTLSVolume = "tls"
	caVolume        = "ca"
)

// dropArgs removes each flag named and the value after it.
func dropArgs(args []string, flags ...string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		if slices.Contains(flags, args[i]) {
			i++
			continue
		}
		out = append(out, args[i])
	}
	return out
}

func caBundleVolume() corev1.Volume {
	return corev1.Volume{Name: caVolume, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: CABundle}}}}
}

// annotateTLS stamps the hashes of the serving certificate and of the CA
// on the pod templates of the server and the agents.
func annotateTLS(obj any, servingHash, caHash string) {
	set := func(m *map[string]string, k, v string) {
		if *m == nil {
			*m = map[string]string{}
		}
		(*m)[k] = v
	}
	switch x := obj.(type) {
	case *appsv1.Deployment:
		if x.Name == ServerName {
			set(&x.Spec.Template.Annotations, ServingCertAnnotation, servingHash)
		}
	case *appsv1.DaemonSet:
		set(&x.Spec.Template.Annotations, CAAnnotation, caHash)
	}
}
