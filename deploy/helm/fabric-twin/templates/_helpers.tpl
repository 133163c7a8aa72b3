{{/* Name of every object of this release ("fabric-twin" when the release is named so). */}}
{{- define "fabric-twin.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{ .Release.Name }}
{{- else -}}
{{ .Release.Name }}-{{ .Chart.Name }}
{{- end -}}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "fabric-twin.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{/* Labels the Service selects pods by. */}}
{{- define "fabric-twin.selector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The Secret holding the token and TLS material. */}}
{{- define "fabric-twin.secretName" -}}
{{ include "fabric-twin.fullname" . }}-secrets
{{- end -}}
