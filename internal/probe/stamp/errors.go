package stamp

import "syscall"

// errConnRefused is what a connected UDP socket reports after an ICMP
// port unreachable.
var errConnRefused error = syscall.ECONNREFUSED
