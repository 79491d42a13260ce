{{/*
Names and labels shared by the templates. The defaults (release `decide`) give the names
deploy/k8s/ uses: decide-replicas, decide-h200, decide-haproxy, decide-postgres, decide-secrets.
*/}}

{{/* RELEASE-decide, or RELEASE when it already says decide; short enough for pod and claim names. */}}
{{- define "decide.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels of one component: (dict "root" $ "name" "decide-haproxy"). */}}
{{- define "decide.labels" -}}
app.kubernetes.io/name: {{ .name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/part-of: decide
{{- end -}}

{{/* What a component's selector matches: its name and the release. */}}
{{- define "decide.selector" -}}
app.kubernetes.io/name: {{ .name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- end -}}

{{/* The Secret's name: the one made beforehand, or the chart's. */}}
{{- define "decide.secretName" -}}
{{- .Values.secrets.existingSecret | default (printf "%s-secrets" (include "decide.fullname" .)) -}}
{{- end -}}

{{/* The store URL the chart's Secret holds: the operator's, else the chart's Postgres, else none. */}}
{{- define "decide.storeUrl" -}}
{{- if .Values.secrets.storeUrl -}}
{{- .Values.secrets.storeUrl -}}
{{- else if .Values.postgres.enabled -}}
{{- printf "postgres://decide:%s@%s-postgres:5432/decide" (.Values.secrets.postgresPassword | urlquery) (include "decide.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* Whether replicas get DECIDE_STORE_URL: a store URL is set, or an existing Secret holds one. */}}
{{- define "decide.hasStore" -}}
{{- if or .Values.secrets.existingSecret (include "decide.storeUrl" .) -}}true{{- end -}}
{{- end -}}
