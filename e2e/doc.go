// Package e2e holds the end-to-end tests of the cnperf binary: each test
// builds the binary once (internal/cnperftest) and runs real `cnperf
// server`, `cnperf agent` and the user verbs as processes, as a user
// would, on loopback. See README.md.
package e2e
