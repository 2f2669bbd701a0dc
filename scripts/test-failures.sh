#!/usr/bin/env bash
# Prints what each failed leaf test of a `go test -v` log said: its last
# messages (file_test.go:N: lines), so that the end of a long verbose run
# (the real-cluster harness prints thousands of lines, component logs
# last) still shows why it failed. Usage: test-failures.sh LOG [LINES]
set -euo pipefail
log=$1
keep=${2:-8}
awk -v keep="$keep" '
/^=== (RUN|CONT|NAME|PAUSE) / { cur = $3; next }
/^ *--- FAIL: / { name = $3; failed[name] = 1; order[++nf] = name; next }
/^ +[A-Za-z0-9_]+\.go:[0-9]+: / {
	if (cur == "") next
	n[cur]++
	line = $0
	sub(/^ +/, "", line)
	if (length(line) > 400) line = substr(line, 1, 400) " ..."
	buf[cur, n[cur] % keep] = line
}
END {
	shown = 0
	for (i = 1; i <= nf; i++) {
		name = order[i]
		leaf = 1
		for (other in failed) if (index(other, name "/") == 1) leaf = 0
		if (!leaf) continue
		if (!shown++) print "== failed tests and their last messages:"
		print "FAIL " name
		c = n[name] + 0
		from = c - keep + 1
		if (from < 1) from = 1
		for (j = from; j <= c; j++) print "    " buf[name, j % keep]
	}
}' "$log"
