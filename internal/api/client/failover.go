package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"syscall"
)

// Failover between server replicas. A client given several URLs (New)
// keeps using one until it fails, then moves to the next, wrapping; every
// copy of the client (WithToken) moves together. What counts as failing:
//
//   - the connection cannot be made (refused, no route, DNS, dial
//     timeout): nothing reached the server, so the request is sent to the
//     next replica at once, each replica tried at most once per request;
//   - any other transport error (reset, timeout mid-request) or an answer
//     502, 503 or 504 (a proxy or load balancer without a live backend, a
//     replica whose store is down): the error is returned, as it would be
//     with one server, and the next request goes to the next replica. Such
//     a request may have been carried out, so only the caller knows
//     whether repeating it is safe (the agent's calls are: heartbeats and
//     fetches repeat, reports carry a report_id, start is idempotent).

// send makes the request to the replica in use, and to the next ones
// while none can be connected to.
func (c *Client) send(ctx context.Context, method, path string, q url.Values, body []byte, tok string) (*http.Response, error) {
	var firstErr error
	for try := 0; try < len(c.bases); try++ {
		i := c.cur.Load()
		u := c.bases[i] + path
		if len(q) > 0 {
			u += "?" + q.Encode()
		}
		var rd *bytes.Reader
		if body != nil {
			rd = bytes.NewReader(body)
		}
		var req *http.Request
		var err error
		if rd != nil {
			req, err = http.NewRequestWithContext(ctx, method, u, rd)
		} else {
			req, err = http.NewRequestWithContext(ctx, method, u, nil)
		}
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", method, path, err)
		}
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := c.hc.Do(req)
		if err == nil {
			return resp, nil
		}
		if firstErr == nil {
			firstErr = fmt.Errorf("%s %s: %w", method, path, err)
		}
		if len(c.bases) == 1 || ctx.Err() != nil {
			break
		}
		c.moveOn(i)
		if !notConnected(err) {
			break
		}
	}
	return nil, firstErr
}

// moveOn makes the replica after i the one in use, unless another request
// already moved on from i.
func (c *Client) moveOn(i int32) {
	if len(c.bases) > 1 {
		c.cur.CompareAndSwap(i, (i+1)%int32(len(c.bases)))
	}
}

// indexOf finds the replica a request went to (-1: none).
func (c *Client) indexOf(req *http.Request) int32 {
	if req == nil {
		return -1
	}
	for i, b := range c.bases {
		if len(req.URL.String()) >= len(b) && req.URL.String()[:len(b)] == b {
			return int32(i)
		}
	}
	return -1
}

// Servers returns every server URL the client may use, in order.
func (c *Client) Servers() []string { return append([]string(nil), c.bases...) }

// unavailable reports whether an answer says the replica (or the proxy in
// front of it) cannot serve now.
func unavailable(code int) bool {
	return code == http.StatusBadGateway || code == http.StatusServiceUnavailable || code == http.StatusGatewayTimeout
}

// notConnected reports whether err means the request never reached a
// server: the connection could not be made.
func notConnected(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var dns *net.DNSError
	return errors.As(err, &dns) || errors.Is(err, syscall.ECONNREFUSED)
}
