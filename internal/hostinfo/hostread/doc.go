// Package hostread reads what internal/hostinfo describes from the host it
// runs on: the machine (kernel, OS image, CPUs, memory) and, in the calling
// thread's network namespace (see internal/nsthread), a link's MTU and
// offloads and the TCP congestion control.
package hostread
