{{- define "nodegc.fullname" -}}
{{- default "nodegc" .Values.fullnameOverride | trunc 50 | trimSuffix "-" -}}
{{- end -}}

{{- define "nodegc.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* Labels on every object's metadata; selectors use only the name and component labels. */}}
{{- define "nodegc.labels" -}}
app.kubernetes.io/name: nodegc
app.kubernetes.io/part-of: nodegc
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "nodegc.agentSelector" -}}
app.kubernetes.io/name: nodegc
app.kubernetes.io/component: agent
{{- end -}}

{{- define "nodegc.controllerSelector" -}}
app.kubernetes.io/name: nodegc
app.kubernetes.io/component: controller
{{- end -}}

{{/* The agent's config file: `nodegc agent --config` reads it; every key is a `nodegc agent` flag. */}}
{{- define "nodegc.agentConfig" -}}
apiVersion: nodegc.io/v1alpha1
kind: AgentConfig
{{- with .Values.agent.config }}
{{ toYaml . }}
{{- end }}
{{- end -}}
