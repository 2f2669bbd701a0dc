{{/* The image of server and agents: the tag given, else the chart's appVersion. */}}
{{- define "cnperf.image" -}}
{{- $tag := toString (.Values.image.tag | default .Chart.AppVersion) }}
image: {{ printf "%s%s%s" .Values.image.repository (ternary "@" ":" (hasPrefix "sha256:" $tag)) $tag | quote }}
{{- with .Values.image.pullPolicy }}
imagePullPolicy: {{ . }}
{{- end }}
{{- end -}}

{{/* The Secrets pods pull the image with (image.pullSecrets). */}}
{{- define "cnperf.pullSecrets" -}}
{{- with .Values.image.pullSecrets }}
imagePullSecrets:
{{- range . }}
  - name: {{ . | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{/* Labels Helm adds to every object's own metadata (not to pod templates or selectors). */}}
{{- define "cnperf.releaseLabels" -}}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The token Secret's name. */}}
{{- define "cnperf.tokenSecret" -}}
{{ default "cnperf-tokens" .Values.auth.existingSecret }}
{{- end -}}

{{/* The Downward API identity every agent reads. */}}
{{- define "cnperf.agentEnv" -}}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: POD_UID
  valueFrom:
    fieldRef:
      fieldPath: metadata.uid
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
- name: NODE_NAME
  valueFrom:
    fieldRef:
      fieldPath: spec.nodeName
- name: NODE_IP
  valueFrom:
    fieldRef:
      fieldPath: status.hostIP
{{- /* The node's zone and region: the pod's copies of the Node's topology
labels (PodTopologyLabels admission, Kubernetes 1.35 on). Empty: none. */}}
- name: CNPERF_ZONE
  valueFrom:
    fieldRef:
      fieldPath: metadata.labels['topology.kubernetes.io/zone']
- name: CNPERF_REGION
  valueFrom:
    fieldRef:
      fieldPath: metadata.labels['topology.kubernetes.io/region']
{{- with .Values.agents.nodeLabels }}
- name: CNPERF_NODE_LABELS
  value: {{ include "cnperf.nodeLabels" . | quote }}
{{- end }}
{{- end -}}

{{/* agents.nodeLabels as KEY=VALUE,... in key order; fails on a bad pair. */}}
{{- define "cnperf.nodeLabels" -}}
{{- $pairs := list }}
{{- range $k, $v := . }}
{{- $v = toString $v }}
{{- if or (not $k) (not $v) (gt (len $v) 63) (contains "," $k) (contains "=" $k) (contains "," $v) }}
{{- fail (printf "agents.nodeLabels %q=%q: want a key and a value of 1-63 characters, without commas" $k $v) }}
{{- end }}
{{- $pairs = append $pairs (printf "%s=%s" $k $v) }}
{{- end }}
{{- join "," $pairs }}
{{- end -}}


{{/* The Pod Security level the values need; fails on the values the opt-ins replaced. */}}
{{- define "cnperf.level" -}}
{{- if hasKey .Values.agents "hostNetwork" }}
{{- fail "agents.hostNetwork is replaced by hostAgents (false by default) and agents.hostResponderPort" }}
{{- end }}
{{- ternary "privileged" "restricted" (or .Values.hostAgents .Values.qosAgents) }}
{{- end -}}

{{/* The serving Secret's name. */}}
{{- define "cnperf.servingSecret" -}}
{{ default "cnperf-server-tls" .Values.tls.existingSecret }}
{{- end -}}
