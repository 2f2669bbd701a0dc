package api

import (
	"fmt"
	"net"
	"strings"
	"unicode"
)

// ParamChecker validates a v1 task_param for tool against the tool's
// allow-list (for example external.Build); target is the destination host.
type ParamChecker func(tool, param, target string) error

// MaxTasksPerRequest bounds how many tasks one create call may carry.
const MaxTasksPerRequest = 1000

// shellMeta are characters that only mean something to a shell; cnperf never
// runs a shell, and a task_param holding one is refused outright.
const shellMeta = ";|&$`<>(){}[]\\\"'*?!~#\n\r"

// CheckParamText refuses task_param text with shell metacharacters or
// control characters, naming the first one found.
func CheckParamText(field, param string) error {
	if len(param) > 512 {
		return BadRequest(field, "longer than 512 characters")
	}
	for i, r := range param {
		if strings.ContainsRune(shellMeta, r) {
			return BadRequest(field, "shell metacharacter %q at position %d is not allowed (arguments are passed to the tool without a shell)", r, i)
		}
		if unicode.IsControl(r) && r != '\t' {
			return BadRequest(field, "control character %U at position %d is not allowed", r, i)
		}
	}
	return nil
}

// ValidateTaskCreates checks a v1 task/create body before any agent is
// looked up: the list is not empty or too long, every element has a known
// task_type, both pod uids, IPs that parse, and a task_param the tool
// accepts. Errors name the element and field ("[1].task_param").
func ValidateTaskCreates(tcs []TaskCreate, check ParamChecker) error {
	if len(tcs) == 0 {
		return BadRequest("(body)", "empty task list: want a JSON array of tasks")
	}
	if len(tcs) > MaxTasksPerRequest {
		return BadRequest("(body)", "%d tasks in one request: at most %d", len(tcs), MaxTasksPerRequest)
	}
	for i, tc := range tcs {
		if err := ValidateTaskCreate(fmt.Sprintf("[%d].", i), tc, check); err != nil {
			return err
		}
	}
	return nil
}

// ValidateTaskCreate checks one v1 task; prefix is put before field names.
func ValidateTaskCreate(prefix string, tc TaskCreate, check ParamChecker) error {
	if !IsV1Type(tc.TaskType) {
		if tc.TaskType == "" {
			return BadRequest(prefix+"task_type", "missing (want one of %s)", strings.Join(V1Types, ", "))
		}
		return BadRequest(prefix+"task_type", "unknown task type %q (want one of %s)", tc.TaskType, strings.Join(V1Types, ", "))
	}
	if strings.TrimSpace(tc.SrcPodUID) == "" {
		return BadRequest(prefix+"src_pod_uid", "missing")
	}
	if strings.TrimSpace(tc.DstPodUID) == "" {
		return BadRequest(prefix+"dst_pod_uid", "missing")
	}
	if tc.SrcPodIP != "" && net.ParseIP(tc.SrcPodIP) == nil {
		return BadRequest(prefix+"src_pod_ip", "%q is not an IP address", tc.SrcPodIP)
	}
	if tc.DstPodIP != "" && net.ParseIP(tc.DstPodIP) == nil {
		return BadRequest(prefix+"dst_pod_ip", "%q is not an IP address", tc.DstPodIP)
	}
	if err := CheckParamText(prefix+"task_param", tc.TaskParam); err != nil {
		return err
	}
	if check != nil {
		target := tc.DstPodIP
		if target == "" {
			target = "192.0.2.1" // a placeholder host: the param is what is checked
		}
		if err := check(tc.TaskType, tc.TaskParam, target); err != nil {
			return BadRequest(prefix+"task_param", "%v", err)
		}
	}
	return nil
}
