package api

import "time"

// Agent identity (outside Kubernetes): an agent joins once with the join
// token and receives a credential of its own, bound to its pod uid.

// CredentialPrefix starts every agent credential the server issues, so a
// server tells one from the join token or a ServiceAccount token (a JWT)
// without a store lookup.
const CredentialPrefix = "cnpa_"

// JoinRequest is the body of POST /api/v2/agent/join.
type JoinRequest struct {
	PodUID string `json:"pod_uid"`
}

// JoinReply answers a join: the agent's own credential, shown this once
// (the server keeps only its hash).
type JoinReply struct {
	PodUID string `json:"pod_uid"`
	Token  string `json:"token"`
}

// Revoked answers POST /api/v2/agents/{uid}/revoke.
type Revoked struct {
	PodUID    string    `json:"pod_uid"`
	CreatedAt time.Time `json:"created_at"` // when the revoked credential was issued
}
