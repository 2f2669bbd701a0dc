package k8s

import (
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// The TLS material `cnperf k8s deploy --tls` keeps in the namespace (and
// the Helm chart's tls.enabled mounts, made by the deploy or by hand):
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

	serverTLSDir = "/etc/cnperf/tls"
	agentCADir   = "/etc/cnperf/ca"

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

// customizeTLS makes the server serve HTTPS only with the serving Secret
// and the agents (every DaemonSet) verify it with the CA bundle, as
// overlays/tls does.
func customizeTLS(obj any) {
	switch x := obj.(type) {
	case *appsv1.Deployment:
		if x.Name != ServerName {
			return
		}
		ps := &x.Spec.Template.Spec
		c := &ps.Containers[0]
		c.Args = append(c.Args, "--tls-cert", serverTLSDir+"/tls.crt", "--tls-key", serverTLSDir+"/tls.key")
		for _, p := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
			if p != nil && p.HTTPGet != nil {
				p.HTTPGet.Scheme = corev1.URISchemeHTTPS
			}
		}
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "tls", MountPath: serverTLSDir, ReadOnly: true})
		ps.Volumes = append(ps.Volumes, corev1.Volume{Name: "tls", VolumeSource: corev1.VolumeSource{
			Secret: &corev1.SecretVolumeSource{SecretName: ServingSecret, DefaultMode: ptrTo(int32(0o400))}}})
	case *appsv1.DaemonSet:
		ps := &x.Spec.Template.Spec
		c := &ps.Containers[0]
		c.Args = agentTLSArgs(c.Args)
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: caVolume, MountPath: agentCADir, ReadOnly: true})
		ps.Volumes = append(ps.Volumes, caBundleVolume())
	}
}

// caVolume is the name of the agents' CA bundle volume.
const caVolume = "ca"

func caBundleVolume() corev1.Volume {
	return corev1.Volume{Name: caVolume, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: CABundle}}}}
}

// agentTLSArgs turns an agent's http:// server URL into https:// and
// adds --ca-file and --tls-server-name: agents reach the server at its
// Service's address (no cluster DNS needed) and verify the Service's DNS
// name in its certificate.
func agentTLSArgs(args []string) []string {
	out := make([]string, 0, len(args)+4)
	for _, a := range args {
		if rest, ok := strings.CutPrefix(a, "http://$(CNPERF_SERVER_SERVICE_HOST)"); ok {
			a = "https://$(CNPERF_SERVER_SERVICE_HOST)" + rest
		}
		out = append(out, a)
	}
	return append(out, "--ca-file", agentCADir+"/"+CABundleKey, "--tls-server-name", ServerName+".$(POD_NAMESPACE).svc")
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
