package api

import (
	"net/http"
	"testing"
)

func TestDecodeRefusesNULAndInvalidUTF8(t *testing.T) {
	tests := []struct {
		name, body, field string // field "": accepted
	}{
		{"plain", `{"pod_uid":"a","pod_name":"p"}`, ""},
		{"escaped backslash is not NUL", `{"pod_uid":"a\\u0000b"}`, ""},
		{"nul in value", `{"pod_uid":"a\u0000b"}`, "pod_uid"},
		{"nul in nested array", `{"tasks":[{"src":"a"},{"src":"b","param":"-c\u00001"}]}`, "tasks[1].param"},
		{"nul in raw JSON", `{"task_id":"t","result":{"notes":["ok","x\u0000"]}}`, "result.notes[1]"},
		{"nul in key", `{"a\u0000":1}`, "a\x00"},
		{"nul top level", `"\u0000"`, "(body)"},
		{"invalid utf-8", "{\"pod_uid\":\"a\xffb\"}", "(body)"},
		{"overlong utf-8", "{\"pod_uid\":\"\xc0\xaf\"}", "(body)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var v any
			err := DecodeBytes([]byte(tt.body), &v)
			if tt.field == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			e, ok := err.(*Error)
			if !ok || e.Status != http.StatusBadRequest || e.Field != tt.field {
				t.Fatalf("got %#v, want a 400 naming %q", err, tt.field)
			}
		})
	}
}
