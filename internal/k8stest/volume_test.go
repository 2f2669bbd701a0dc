package k8stest

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnperf/cnperf/internal/k8s"
)

// claimVolume makes PersistentVolume name, 1Gi on hostPath dir under the
// run's directory (open to all: the server runs as uid 65532), bound in
// advance to claim cnperf-data in namespace ns, so that the harness's own
// volume stays for the deploy into namespace cnperf. The caller deletes it.
func claimVolume(ctx context.Context, t *testing.T, cl *Cluster, kc *k8s.Client, name, dir, ns string) {
	t.Helper()
	pvDir := filepath.Join(cl.RunDir, dir)
	if err := os.MkdirAll(pvDir, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(pvDir, 0o777)
	_, err := kc.Kube.CoreV1().PersistentVolumes().Create(ctx, &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			ClaimRef:                      &corev1.ObjectReference{Namespace: ns, Name: "cnperf-data"},
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: pvDir}},
		}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}
