package k8s

import (
	"bufio"
	"bytes"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func bufioReader(b []byte) *bufio.Reader { return bufio.NewReader(bytes.NewReader(b)) }

// customize applies opts to one object of the base, in place.
func customize(obj runtime.Object, o DeployOptions) error {
	if o.TLS {
		customizeTLS(obj)
	}
	switch x := obj.(type) {
	case *appsv1.Deployment:
		customizePod(&x.Spec.Template.Spec, o)
		if x.Name == ServerName {
			for i := range x.Spec.Template.Spec.Containers {
				c := &x.Spec.Template.Spec.Containers[i]
				c.Args = append(c.Args, o.ServerArgs...)
				if o.PostgresSecret != "" {
					usePostgres(&x.Spec.Template.Spec, c, o.PostgresSecret)
				}
			}
		}
	case *appsv1.DaemonSet:
		customizePod(&x.Spec.Template.Spec, o)
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

func customizePod(ps *corev1.PodSpec, o DeployOptions) {
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
