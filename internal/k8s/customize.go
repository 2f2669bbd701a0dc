package k8s

import (
	"bufio"
	"bytes"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func bufioReader(b []byte) *bufio.Reader { return bufio.NewReader(bytes.NewReader(b)) }

// customize applies opts to one object of the base, in place.
func customize(obj runtime.Object, o DeployOptions) error {
	if !o.TLS {
		customizePlain(obj)
	}
	switch x := obj.(type) {
	case *corev1.Namespace:
		x.Labels[podSecurityEnforce] = o.Level()
		x.Labels[podSecurityWarn] = o.Level()
	case *appsv1.Deployment:
		customizePod(&x.Spec.Template.Spec, o)
		if x.Name == ServerName {
			for i := range x.Spec.Template.Spec.Containers {
				c := &x.Spec.Template.Spec.Containers[i]
				// cnperf server serves TLS by default (its own CA when
				// given no certificate); --tls=false asks for plain HTTP.
				c.Args = slices.DeleteFunc(c.Args, func(a string) bool { return a == "--plain-http" })
				if !o.TLS {
					c.Args = append(c.Args, "--plain-http")
				}
				c.Args = append(c.Args, o.ServerArgs...)
				if o.PostgresSecret != "" {
					usePostgres(&x.Spec.Template.Spec, c, o.PostgresSecret)
				}
			}
			if o.PostgresSecret != "" {
				runReplicas(x)
			}
		}
	case *appsv1.DaemonSet:
		customizePod(&x.Spec.Template.Spec, o)
		if o.QoSAgents {
			withQoS(&x.Spec.Template.Spec)
		}
	case *corev1.ServiceAccount:
		if o.ImagePullSecret != "" {
			x.ImagePullSecrets = append(x.ImagePullSecrets, corev1.LocalObjectReference{Name: o.ImagePullSecret})
		}
	case *corev1.Service:
		if x.Name == ServerName && o.NodePort > 0 {
			x.Spec.Type = corev1.ServiceTypeNodePort
			for i := range x.Spec.Ports {
				x.Spec.Ports[i].NodePort = o.NodePort
			}
		}
	}
	return nil
}

// Pod Security admission's namespace labels.
const (
	podSecurityEnforce = "pod-security.kubernetes.io/enforce"
	podSecurityWarn    = "pod-security.kubernetes.io/warn"
)

// QoSCaps are the capabilities the qos-agents opt-in gives every agent.
var QoSCaps = []corev1.Capability{"NET_ADMIN", "NET_RAW"}

// withQoS gives an agent pod NET_ADMIN and NET_RAW as uid 0 (a non-root
// process gets no added capability in its effective set), as
// components/qos-agents does.
func withQoS(ps *corev1.PodSpec) {
	if ps.SecurityContext == nil {
		ps.SecurityContext = &corev1.PodSecurityContext{}
	}
	ps.SecurityContext.RunAsNonRoot = ptrTo(false)
	ps.SecurityContext.RunAsUser = ptrTo(int64(0))
	c := &ps.Containers[0]
	if c.SecurityContext == nil {
		c.SecurityContext = &corev1.SecurityContext{}
	}
	if c.SecurityContext.Capabilities == nil {
		c.SecurityContext.Capabilities = &corev1.Capabilities{}
	}
	c.SecurityContext.Capabilities.Add = append([]corev1.Capability(nil), QoSCaps...)
}

func customizePod(ps *corev1.PodSpec, o DeployOptions) {
	if o.ImagePullSecret != "" {
		ps.ImagePullSecrets = append(ps.ImagePullSecrets, corev1.LocalObjectReference{Name: o.ImagePullSecret})
	}
	for _, cs := range [][]corev1.Container{ps.InitContainers, ps.Containers} {
		for i := range cs {
			if o.Image != "" {
				cs[i].Image = o.Image
			}
			if o.ImagePullPolicy != "" {
				cs[i].ImagePullPolicy = o.ImagePullPolicy
			}
		}
	}
}

// usePostgres makes the server read its DSN from secret and drops the
// SQLite volume, as overlays/postgres does.
func usePostgres(ps *corev1.PodSpec, c *corev1.Container, secret string) {
	for i := range c.Env {
		if c.Env[i].Name == "CNPERF_DB" {
			c.Env[i].Value = ""
			c.Env[i].ValueFrom = &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: "dsn"}}
		}
	}
	var mounts []corev1.VolumeMount
	for _, m := range c.VolumeMounts {
		if m.Name != "data" {
			mounts = append(mounts, m)
		}
	}
	c.VolumeMounts = mounts
	var vols []corev1.Volume
	for _, v := range ps.Volumes {
		if v.Name != "data" {
			vols = append(vols, v)
		}
	}
	ps.Volumes = vols
}

// ServerReplicas is how many servers run on PostgreSQL (overlays/postgres).
const ServerReplicas = 2

// runReplicas makes the server Deployment run ServerReplicas replicas on
// PostgreSQL, as overlays/postgres does: rolled one at a time with none
// unavailable (the base's Recreate exists for SQLite's single writer), and
// spread over nodes where the cluster has them.
func runReplicas(d *appsv1.Deployment) {
	n := int32(ServerReplicas)
	d.Spec.Replicas = &n
	zero, one := intstr.FromInt32(0), intstr.FromInt32(1)
	d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: &zero, MaxSurge: &one}}
	d.Spec.Template.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
		MaxSkew: 1, TopologyKey: "kubernetes.io/hostname", WhenUnsatisfiable: corev1.ScheduleAnyway,
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": ServerName}},
	}}
}

// PodSpecOf returns the pod template's spec of a Deployment or a
// DaemonSet, and nil for any other object.
func PodSpecOf(obj runtime.Object) *corev1.PodSpec {
	switch x := obj.(type) {
	case *appsv1.Deployment:
		return &x.Spec.Template.Spec
	case *appsv1.DaemonSet:
		return &x.Spec.Template.Spec
	}
	return nil
}
