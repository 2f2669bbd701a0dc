package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"testing"

	"github.com/cnperf/cnperf/internal/probe/external"
)

// The fuzz targets run their seeds under `go test`; scripts/fuzz.sh runs
// each for a bounded time. The seeds are the bodies cnperf's agents, CLI
// and the seed's curl workflow send.

var v1Seeds = []string{
	`[{"src_pod_uid":"a","src_pod_ip":"10.244.1.2","dst_pod_uid":"b","dst_pod_ip":"10.244.2.2","task_param":"-c 5","task_type":"ping"}]`,
	`[{"src_pod_uid":"a","dst_pod_uid":"b","task_param":"-u -b 100M -t 10 -i 1 -S 0x10","task_type":"iperf"},{"src_pod_uid":"b","dst_pod_uid":"a","task_param":"-t 5 -P 2","task_type":"iperf3"}]`,
	`[{"src_pod_uid":"a","dst_pod_uid":"b","task_param":"-q 1 -m 5","task_type":"traceroute"}]`,
	`{"pod_name":"n1-p1","pod_namespace":"default","pod_uid":"uid-1","pod_ip":"10.244.1.2","node_name":"n1","node_ip":"198.18.0.2","responder_addr":"10.244.1.2:5201","version":"dev","running":["t1"],"boot_id":"b1"}`,
	`{"task_id":"t1","pod_uid":"uid-1","report_id":"r1","state":"succeeded","task_result":"PING ...","result":{"kind":"ping","rtt_ms":{"p50":0.1}}}`,
	`{"task_id":"t1","pod_uid":"uid-1","task_status":4,"reason":"exit 1"}`,
	`[]`, `{}`, `null`, `[{"task_type":"ping","extra":1}]`, "{\"pod_uid\":\"\xff\x00\"}",
}

var v2Seeds = []string{
	`{"suite":"baseline","allow_concurrency":true,"params":{"time":"2s"},"tasks":[{"src":"n1-p1","dst":"n2-p1","spec":{"kind":"tcp","duration":"2s","streams":2,"dscp":"AF41"}}]}`,
	`{"tasks":[{"src":"a","dst":"b","spec":{"kind":"udp","rate":"1G","size":1400,"duration":5},"qos":{"kind":"tbf","rate":"100M"},"timeout":"40s","exclusive":false}]}`,
	`{"tasks":[{"src":"a","dst":"b","type":"iperf3","param":"-t 5 -R"},{"src":"a","dst":"b","spec":{"kind":"ping","count":5,"interval":"200ms"}}]}`,
	`{"tasks":[{"src":"a","dst":"b","spec":{"kind":"rr","proto":"crr","count":1000}}]}`,
	`{"reason":"enough"}`, `{"pod_uid":"uid-1","port":5201}`, `{"pod_uid":"uid-1","error":"bind: address in use"}`,
	`{"tasks":[{"src":"a","dst":"b","timeout":1e300}]}`, `{"tasks":null}`,
}

// roundTrip checks what a decoder accepted: it encodes, decodes strictly
// again, and encodes to the same bytes, so what the server stores and
// answers is what it read.
func roundTrip[T any](t *testing.T, data []byte) {
	t.Helper()
	var v T
	if err := DecodeBytes(data, &v); err != nil {
		var ae *Error
		if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || ae.Message == "" {
			t.Fatalf("decode error %#v: want an *Error with status 400 and a message", err)
		}
		return
	}
	b1, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("accepted body does not encode: %v", err)
	}
	var w T
	if err := DecodeBytes(b1, &w); err != nil {
		t.Fatalf("encoded form %s of an accepted body is refused: %v", b1, err)
	}
	b2, err := json.Marshal(w)
	if err != nil {
		t.Fatalf("encode again: %v", err)
	}
	if !bytes.Equal(b1, b2) {
		t.Fatalf("round trip changed the value:\n%s\n%s", b1, b2)
	}
}

// FuzzDecodeV1 feeds the v1 decoders (task/create, heartbeat, report_task)
// and the task/create validation with the tools' allow-lists.
func FuzzDecodeV1(f *testing.F) {
	for _, s := range v1Seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		roundTrip[[]TaskCreate](t, data)
		roundTrip[Heartbeat](t, data)
		roundTrip[Report](t, data)
		var tcs []TaskCreate
		if DecodeBytes(data, &tcs) != nil {
			return
		}
		check := func(tool, param, target string) error {
			_, err := external.Build(tool, param, target)
			return err
		}
		if err := ValidateTaskCreates(tcs, check); err != nil {
			var ae *Error
			if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || ae.Field == "" {
				t.Fatalf("validation error %#v: want a 400 naming the field", err)
			}
		}
	})
}

// FuzzDecodeV2 feeds the v2 decoders (run create, cancel, start, serving).
func FuzzDecodeV2(f *testing.F) {
	for _, s := range v2Seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		roundTrip[RunCreate](t, data)
		roundTrip[CancelRequest](t, data)
		roundTrip[StartRequest](t, data)
		roundTrip[Serving](t, data)
	})
}
