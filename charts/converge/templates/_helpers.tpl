{{/* Chart name, for labels. */}}
{{- define "converge.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name, the prefix of every namespaced and cluster-scoped resource except
the webhook configurations (whose names are fixed). Truncated to 47
characters so that "<fullname>-webhook-service" stays a valid Service name
(63 at most).
*/}}
{{- define "converge.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 47 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 47 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 47 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Chart label value. */}}
{{- define "converge.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels on every resource. */}}
{{- define "converge.labels" -}}
helm.sh/chart: {{ include "converge.chart" . }}
app.kubernetes.io/name: {{ include "converge.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: converge
{{- end }}

{{/* Labels that select the manager Pods. */}}
{{- define "converge.selectorLabels" -}}
app.kubernetes.io/name: {{ include "converge.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: manager
{{- end }}

{{/* The manager's ServiceAccount. */}}
{{- define "converge.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (printf "%s-manager" (include "converge.fullname" .)) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The webhook Service, which the webhook configurations call. */}}
{{- define "converge.webhookServiceName" -}}
{{- printf "%s-webhook-service" (include "converge.fullname" .) }}
{{- end }}

{{/* The metrics Service. */}}
{{- define "converge.metricsServiceName" -}}
{{- printf "%s-metrics-service" (include "converge.fullname" .) }}
{{- end }}

{{/* The Secret the manager keeps its webhook serving certificate in. */}}
{{- define "converge.webhookCertSecretName" -}}
{{- printf "%s-webhook-cert" (include "converge.fullname" .) }}
{{- end }}

{{/* The manager image. */}}
{{- define "converge.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion (toString .Values.image.tag)) }}
{{- end }}

{{/*
Names of the webhook configurations. Fixed: the manager injects its CA
bundle into exactly these names (internal/install), so only one release per
cluster is supported.
*/}}
{{- define "converge.mutatingWebhookConfigurationName" -}}
converge-mutating-webhook-configuration
{{- end }}
{{- define "converge.validatingWebhookConfigurationName" -}}
converge-validating-webhook-configuration
{{- end }}
