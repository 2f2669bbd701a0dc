package api

import "encoding/json"

// Envelope wraps every v1 answer as the seed's system did: Status 0 and the
// payload in Data on success; on error Status is the HTTP status code and Msg
// says what was wrong.
type Envelope struct {
	Status int             `json:"status"`
	Msg    string          `json:"msg"`
	Data   json.RawMessage `json:"data"`
}
