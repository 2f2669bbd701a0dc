// Package api holds the wire types shared by cnperf's server, agents and
// clients: the seed-compatible v1 API (the {status, msg, data} envelope,
// PascalCase task and client objects, numeric status codes) and the
// structured v2 API (runs of typed probe specs, typed results, paging). It
// also decodes request bodies strictly (unknown fields, trailing data and
// oversized bodies are errors naming the problem) and validates task
// creation requests before anything is stored.
//
// Numeric codes of the v1 API:
//
//	TaskStatus   1 created (pending or dispatched), 2 running, 3 finished
//	             (succeeded), 4 failed, 5 timed out, 6 cancelled
//	ClientStatus 1 free, 2 busy, 3 offline
//	status       0 success; on error the HTTP status code (400, 401, 404,
//	             409, 413, 500) with msg saying what was wrong
package api
