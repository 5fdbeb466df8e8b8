{{/* Prefix of every object name; cluster-scoped objects (ClusterRoles) carry it too, so releases never collide. */}}
{{- define "mbf.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else if contains "model-backfill" .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (.Values.nameOverride | default "model-backfill") | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "mbf.functions" -}}source demand admit cancel lifecycle{{- end -}}

{{- define "mbf.labels" -}}
app.kubernetes.io/name: model-backfill
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: model-backfill
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Pod selector of one component: (dict "root" . "component" "demand") */}}
{{- define "mbf.selector" -}}
app.kubernetes.io/name: model-backfill
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "mbf.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The users the chosen mode runs (each needs a NATS credential). */}}
{{- define "mbf.natsUsers" -}}
{{- $users := list "source" "demand" "admit" "cancel" "lifecycle" "provision" -}}
{{- if .Values.ingress.enabled }}{{ $users = append $users "ingress" }}{{ end -}}
{{- if eq .Values.mode "knative" }}{{ $users = append $users "bridge" }}{{ end -}}
{{- join " " $users -}}
{{- end -}}

{{/* secretKeyRef of a NATS user's password: (dict "root" . "user" "demand") */}}
{{- define "mbf.natsSecretRef" -}}
{{- $c := index .root.Values.nats.credentials .user | default dict -}}
{{- if $c.existingSecret -}}
name: {{ $c.existingSecret }}
key: {{ $c.key | default .user }}
{{- else -}}
{{- if not $c.password -}}
{{- fail (printf "nats.credentials.%s: set existingSecret (and key) or password" .user) -}}
{{- end -}}
name: {{ include "mbf.fullname" .root }}-nats
key: {{ .user }}
{{- end -}}
{{- end -}}

{{/* The env every NATS client shares: (dict "root" . "user" "demand") */}}
{{- define "mbf.natsEnv" -}}
- name: LOG_LEVEL
  valueFrom:
    configMapKeyRef:
      name: {{ include "mbf.fullname" .root }}-config
      key: LOG_LEVEL
- name: NATS_HOST
  valueFrom:
    configMapKeyRef:
      name: {{ include "mbf.fullname" .root }}-config
      key: NATS_HOST
- name: NATS_PASSWORD
  valueFrom:
    secretKeyRef:
      {{- include "mbf.natsSecretRef" . | nindent 6 }}
- name: NATS_URL
  value: nats://{{ .user }}:$(NATS_PASSWORD)@$(NATS_HOST)
{{- with .root.Values.watchNamespaces }}
- name: WATCH_NAMESPACES
  value: {{ join "," . | quote }}
{{- end }}
{{- end -}}

{{- define "mbf.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 1000
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "mbf.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
{{- end -}}

{{/*
Exactly the Kubernetes verbs each function uses (base/rbac.yaml says why). source and demand: none. "watch": the
Kubernetes event source (the ApiServerSource in mode knative, source's watcher in mode keda).
*/}}
{{- define "mbf.rules.admit" -}}
- apiGroups: [ai.flexinfer]
  resources: [modelbackfills]
  verbs: [get, patch]
- apiGroups: [ai.flexinfer]
  resources: [modelbackfills/status]
  verbs: [update]
- apiGroups: [ai.flexinfer]
  resources: [models, gamingsessions, gpuleases]
  verbs: [get, list, watch]
- apiGroups: [batch]
  resources: [cronjobs]
  verbs: [get]
- apiGroups: [batch]
  resources: [jobs]
  verbs: [get, list, watch, create, delete]
- apiGroups: [""]
  resources: [events]
  verbs: [create]
{{- end -}}
{{- define "mbf.rules.cancel" -}}
- apiGroups: [ai.flexinfer]
  resources: [modelbackfills]
  verbs: [get, patch]
- apiGroups: [ai.flexinfer]
  resources: [modelbackfills/status]
  verbs: [update]
- apiGroups: [ai.flexinfer]
  resources: [models]
  verbs: [get]
- apiGroups: [ai.flexinfer]
  resources: [gamingsessions, gpuleases]
  verbs: [list]
- apiGroups: [batch]
  resources: [cronjobs]
  verbs: [get]
- apiGroups: [batch]
  resources: [jobs]
  verbs: [get, list, delete]
- apiGroups: [""]
  resources: [events]
  verbs: [create]
{{- end -}}
{{- define "mbf.rules.lifecycle" -}}
- apiGroups: [ai.flexinfer]
  resources: [modelbackfills]
  verbs: [get, list, patch]
- apiGroups: [ai.flexinfer]
  resources: [modelbackfills/status]
  verbs: [update]
- apiGroups: [ai.flexinfer]
  resources: [models]
  verbs: [get, list]
- apiGroups: [ai.flexinfer]
  resources: [gamingsessions, gpuleases]
  verbs: [list]
- apiGroups: [batch]
  resources: [cronjobs]
  verbs: [get]
- apiGroups: [batch]
  resources: [jobs]
  verbs: [get, list, delete]
- apiGroups: [""]
  resources: [events]
  verbs: [create]
{{- end -}}
{{- define "mbf.rules.watch" -}}
- apiGroups: [ai.flexinfer]
  resources: [modelbackfills, models, gamingsessions, gpuleases]
  verbs: [get, list, watch]
- apiGroups: [batch]
  resources: [jobs]
  verbs: [get, list, watch]
{{- end -}}
