{{/* Name of the chart, overridable. */}}
{{- define "kse.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: the release name when it already holds the chart name. */}}
{{- define "kse.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "kse.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "kse.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kse.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "kse.labels" -}}
helm.sh/chart: {{ include "kse.chart" . }}
{{ include "kse.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.additionalLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* metadata.labels and annotations of every object. */}}
{{- define "kse.metadata" -}}
labels:
  {{- include "kse.labels" . | nindent 2 }}
{{- with .Values.additionalAnnotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{- define "kse.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "kse.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name: name an existing ServiceAccount when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "kse.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* Secret holding the Scaleway API key: the existing one or the chart's. */}}
{{- define "kse.scalewaySecretName" -}}
{{- if .Values.scaleway.credentials.existingSecret }}
{{- .Values.scaleway.credentials.existingSecret }}
{{- else }}
{{- printf "%s-scaleway" (include "kse.fullname" .) }}
{{- end }}
{{- end }}

{{- define "kse.bucketSecretName" -}}
{{- if .Values.imageBucket.credentials.existingSecret }}
{{- .Values.imageBucket.credentials.existingSecret }}
{{- else }}
{{- printf "%s-image-bucket" (include "kse.fullname" .) }}
{{- end }}
{{- end }}

{{/*
Namespace of the controller's own state (leader election Lease, rescue SSH key
Secret, records) in the cluster it manages: the release namespace, except with a
hosted control plane, where that cluster is the tenant and tenant.namespace may
name another one.
*/}}
{{- define "kse.systemNamespace" -}}
{{- default .Release.Namespace .Values.tenant.namespace }}
{{- end }}

{{/* "true" when the controller runs here (management cluster) and manages the tenant named by tenant.kubeconfigSecret. */}}
{{- define "kse.remote" -}}
{{- if and .Values.tenant.kubeconfigSecret.name (not .Values.tenant.rbacOnly) }}true{{ end }}
{{- end }}

{{/* "true" when this release holds the RBAC of the managed cluster: every layout but the management side of a hosted control plane. */}}
{{- define "kse.rbac" -}}
{{- if not (include "kse.remote" .) }}true{{ end }}
{{- end }}

{{/* Namespaces where the controller reads join Secrets: the listed ones, else its system namespace. */}}
{{- define "kse.joinSecretNamespaces" -}}
{{- default (list (include "kse.systemNamespace" .)) .Values.rbac.joinSecretNamespaces | uniq | join "," }}
{{- end }}

{{/* Whether the controller gets bucket credentials at all (else anonymous reads). */}}
{{- define "kse.bucketCredentials" -}}
{{- if or .Values.imageBucket.credentials.existingSecret .Values.imageBucket.credentials.accessKeyID }}true{{ end }}
{{- end }}

{{/*
Cross-field checks the schema cannot say clearly. Each message names the value
and how to fix it.
*/}}
{{- define "kse.validate" -}}
{{- if and .Values.tenant.namespace (not (or .Values.tenant.kubeconfigSecret.name .Values.tenant.rbacOnly)) }}
{{- fail "tenant.namespace is for a hosted control plane only: set tenant.kubeconfigSecret.name (management cluster) or tenant.rbacOnly (tenant cluster), or leave tenant.namespace empty" }}
{{- end }}
{{- if not .Values.tenant.rbacOnly }}
{{- $c := .Values.scaleway.credentials }}
{{- if not $c.existingSecret }}
{{- if not (and $c.accessKey $c.secretKey) }}
{{- fail "scaleway.credentials: set existingSecret (a Secret with SCW_ACCESS_KEY and SCW_SECRET_KEY), or both accessKey and secretKey" }}
{{- end }}
{{- if not .Values.scaleway.defaultProjectID }}
{{- fail "scaleway.defaultProjectID is required when the chart creates the credentials Secret (servers and SSH keys are created in this project)" }}
{{- end }}
{{- end }}
{{- $b := .Values.imageBucket.credentials }}
{{- if and (not $b.existingSecret) (or $b.accessKeyID $b.secretAccessKey) (not (and $b.accessKeyID $b.secretAccessKey)) }}
{{- fail "imageBucket.credentials: set both accessKeyID and secretAccessKey, or existingSecret" }}
{{- end }}
{{- if and (or (include "kse.bucketCredentials" .) .Values.imageBucket.bucket .Values.imageBucket.public) (not .Values.imageBucket.endpoint) }}
{{- fail "imageBucket.endpoint is required when a bucket, credentials or public reads are set (e.g. http://garage.garage.svc:3900)" }}
{{- end }}
{{- if and .Values.imageBucket.public (include "kse.bucketCredentials" .) }}
{{- fail "imageBucket.public: plain URLs need no credentials; unset imageBucket.credentials or set public to false" }}
{{- end }}
{{- if and .Values.imageBucket.caBundle.configMap .Values.imageBucket.caBundle.secret }}
{{- fail "imageBucket.caBundle: set configMap or secret, not both" }}
{{- end }}
{{- if and .Values.podDisruptionBudget.enabled (lt (int .Values.replicas) 2) }}
{{- fail "podDisruptionBudget.enabled needs replicas >= 2 (with one replica the budget would block node drains); set podDisruptionBudget.enabled=false" }}
{{- end }}
{{- end }}
{{- end }}
