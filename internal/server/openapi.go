package server

import (
	"encoding/json"
	"net/http"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/probe"
)

// openAPIDocument builds the OpenAPI 3 document from the route table and
// the api package's types (by reflection), so it cannot drift from them.
func openAPIDocument() ([]byte, error) {
	s := &Server{}
	g := &schemaGen{defs: map[string]any{}}
	paths := map[string]map[string]any{}
	pathParam := regexp.MustCompile(`\{([a-z_]+)\}`)
	for _, rt := range s.table() {
		op := map[string]any{"summary": rt.summary, "operationId": opID(rt.method, rt.path)}
		var params []any
		for _, m := range pathParam.FindAllStringSubmatch(rt.path, -1) {
			params = append(params, map[string]any{"name": m[1], "in": "path", "required": true, "schema": map[string]any{"type": "string"}})
		}
		for _, q := range rt.query {
			params = append(params, map[string]any{"name": q.name, "in": "query", "required": q.required, "description": q.desc, "schema": map[string]any{"type": "string"}})
		}
		if len(params) > 0 {
			op["parameters"] = params
		}
		if rt.body != nil {
			op["requestBody"] = map[string]any{"required": true, "content": map[string]any{"application/json": map[string]any{"schema": g.schema(reflect.TypeOf(rt.body))}}}
		}
		status := rt.status
		if status == 0 {
			status = http.StatusOK
		}
		resp := map[string]any{"description": http.StatusText(status)}
		if rt.answer != nil {
			sch := g.schema(reflect.TypeOf(rt.answer))
			if rt.v1 {
				sch = map[string]any{"allOf": []any{map[string]any{"$ref": "#/components/schemas/Envelope"},
					map[string]any{"type": "object", "properties": map[string]any{"data": sch}}}}
			}
			resp["content"] = map[string]any{"application/json": map[string]any{"schema": sch}}
		}
		responses := map[string]any{strconv.Itoa(status): resp}
		errRef := map[string]any{"$ref": "#/components/schemas/ErrorBody"}
		if rt.v1 {
			errRef = map[string]any{"$ref": "#/components/schemas/Envelope"}
		}
		errResp := func(d string) any {
			return map[string]any{"description": d, "content": map[string]any{"application/json": map[string]any{"schema": errRef}}}
		}
		if rt.auth != nil {
			op["security"] = []any{map[string]any{"bearer": []string{}}}
			responses["401"] = errResp("missing or wrong bearer token")
			responses["400"] = errResp("bad request: the message names the field")
			responses["404"] = errResp("not found")
			responses["409"] = errResp("conflict with the current state")
		}
		if rt.body != nil {
			responses["413"] = errResp("body too large")
		}
		op["responses"] = responses
		if paths[rt.path] == nil {
			paths[rt.path] = map[string]any{}
		}
		paths[rt.path][strings.ToLower(rt.method)] = op
	}
	g.schema(reflect.TypeOf(api.Envelope{}))
	g.schema(reflect.TypeOf(api.ErrorBody{}))
	g.schema(reflect.TypeOf(probe.Result{}))
	doc := map[string]any{
		"openapi": "3.0.3",
		"info": map[string]any{
			"title":   "cnperf control plane",
			"version": "2",
			"description": "v1: the seed system's API in its {status, msg, data} envelope (TaskStatus 1 created, 2 running, 3 finished, " +
				"4 failed, 5 timed out, 6 cancelled; ClientStatus 1 free, 2 busy, 3 offline; status 0 or the HTTP status). " +
				"v2: runs of typed probe specs with typed results. Agent endpoints take the agent token, the others the user token.",
		},
		"paths": paths,
		"components": map[string]any{
			"securitySchemes": map[string]any{"bearer": map[string]any{"type": "http", "scheme": "bearer"}},
			"schemas":         g.defs,
		},
	}
	return json.MarshalIndent(doc, "", "  ")
}

func opID(method, path string) string {
	var b strings.Builder
	b.WriteString(strings.ToLower(method))
	for _, part := range strings.FieldsFunc(path, func(r rune) bool { return r == '/' || r == '{' || r == '}' || r == '_' || r == '.' }) {
		if part == "api" {
			continue
		}
		b.WriteString(strings.ToUpper(part[:1]) + part[1:])
	}
	return b.String()
}

// schemaGen turns Go types into JSON schemas, named types into components.
type schemaGen struct {
	defs map[string]any
}

var (
	timeType     = reflect.TypeOf(time.Time{})
	rawType      = reflect.TypeOf(json.RawMessage{})
	durationType = reflect.TypeOf(probe.Duration(0))
)

func (g *schemaGen) schema(t reflect.Type) map[string]any {
	switch t {
	case timeType:
		return map[string]any{"type": "string", "format": "date-time"}
	case rawType:
		return map[string]any{"description": "any JSON value"}
	case durationType:
		return map[string]any{"type": "string", "description": "a duration such as 10s or 250ms (or a number of seconds)"}
	}
	switch t.Kind() {
	case reflect.Pointer:
		s := g.schema(t.Elem())
		if _, ref := s["$ref"]; ref {
			return map[string]any{"allOf": []any{s}, "nullable": true}
		}
		s["nullable"] = true
		return s
	case reflect.Slice, reflect.Array:
		return map[string]any{"type": "array", "items": g.schema(t.Elem())}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": g.schema(t.Elem())}
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return map[string]any{"type": "integer"}
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}
	case reflect.Struct:
		name := t.Name()
		if t.PkgPath() != "" && strings.HasSuffix(t.PkgPath(), "/probe") {
			name = "Probe" + name
		}
		if name == "" {
			return g.object(t)
		}
		ref := map[string]any{"$ref": "#/components/schemas/" + name}
		if _, done := g.defs[name]; done {
			return ref
		}
		g.defs[name] = map[string]any{} // placeholder against recursion
		g.defs[name] = g.object(t)
		return ref
	}
	return map[string]any{}
}

func (g *schemaGen) object(t reflect.Type) map[string]any {
	props := map[string]any{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		props[name] = g.schema(f.Type)
	}
	return map[string]any{"type": "object", "properties": props}
}
