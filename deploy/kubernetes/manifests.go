// Package kubernetes embeds cnperf's Kubernetes manifests (the kustomize
// base, its opt-in components and its overlays in this directory) so that `cnperf k8s deploy` applies
// exactly the files users can apply with `kubectl apply -k`. It only holds
// the files; internal/k8s reads and applies them.
package kubernetes

import "embed"

// Files holds base/, components/ and overlays/ with their
// kustomization.yaml files.
//
//go:embed base/*.yaml components/*/*.yaml overlays/*/*.yaml
var Files embed.FS

// Base is the directory of the kustomize base inside Files.
const Base = "base"
