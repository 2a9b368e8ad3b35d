{{/* The release's objects are named after it: "tandem" for a release called tandem. */}}
{{- define "tandem.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "tandem.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "tandem.labels" -}}
{{ include "tandem.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "tandem.image" -}}
{{- $tag := .Values.image.tag | default (printf "%s-%s" .Chart.AppVersion .Values.device) -}}
{{ printf "%s:%s" .Values.image.repository $tag }}
{{- end -}}

{{/* The API keys' Secret: the user's, or the chart's own. */}}
{{- define "tandem.apiKeysSecret" -}}
{{- .Values.auth.existingSecret | default (printf "%s-api-keys" (include "tandem.fullname" .)) -}}
{{- end -}}

{{- define "tandem.authEnabled" -}}
{{- if or .Values.auth.existingSecret .Values.auth.apiKeys -}}true{{- end -}}
{{- end -}}

{{/* The user's tandem.toml, parsed: it must be TOML, and leave the chart's keys alone. */}}
{{- define "tandem.config" -}}
{{- $config := fromToml .Values.config -}}
{{- if hasKey $config "Error" -}}
{{- fail (printf "config is not TOML: %s" $config.Error) -}}
{{- end -}}
{{- range $key := list "listen" "grpc_listen" "metrics_listen" "model_repository" "api_keys_file" "tls" -}}
{{- if hasKey $config $key -}}
{{- fail (printf "config sets %s, which the chart sets (service, models, auth, tls values)" $key) -}}
{{- end -}}
{{- end -}}
{{- if and (hasKey $config "coloc") (hasKey $config.coloc "socket") -}}
{{- fail "config sets [coloc] socket, which the chart sets (the trainer's shared emptyDir)" -}}
{{- end -}}
{{- toYaml $config -}}
{{- end -}}

{{/* The kubelet's SIGKILL comes after preStop + drain + grace, and 5 s for the exit. */}}
{{- define "tandem.terminationGracePeriodSeconds" -}}
{{- $config := include "tandem.config" . | fromYaml -}}
{{- $limits := $config.limits | default dict -}}
{{- $drain := $limits.shutdown_drain_ms | default 0 | int -}}
{{- $grace := $limits.shutdown_grace_ms | default 30000 | int -}}
{{- add .Values.preStopSeconds (div (add $drain $grace 999) 1000) 5 -}}
{{- end -}}

{{- define "tandem.scheme" -}}
{{- if .Values.tls.enabled -}}HTTPS{{- else -}}HTTP{{- end -}}
{{- end -}}

{{/* Every container: non-root (the pod's uid), no privilege, a read-only root. */}}
{{- define "tandem.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
{{- end -}}

{{/* The gateway's resources, with the GPU on cuda. */}}
{{- define "tandem.resources" -}}
{{- $resources := deepCopy .Values.resources -}}
{{- if eq .Values.device "cuda" -}}
{{- $limits := get $resources "limits" | default dict -}}
{{- $_ := set $limits "nvidia.com/gpu" .Values.gpus -}}
{{- $_ := set $resources "limits" $limits -}}
{{- end -}}
{{- toYaml $resources -}}
{{- end -}}
