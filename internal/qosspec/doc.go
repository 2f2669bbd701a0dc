// Package qosspec describes traffic control as data, with no netlink: the
// bandwidth quantities pods are annotated with (ParseBandwidth), and the
// set-ups a suite asks its environment for. Package qos applies them to
// links; suites, the server's API and the Kubernetes side depend only on
// this package, so none of them pulls in netlink.
package qosspec
